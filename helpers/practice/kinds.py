"""The five kinds of drill. Each builds a Question from a random generator: the right answer
from JAX's placement, the generic mistakes of `helpers.practice.mistakes` turned into wrong
answers of this kind, and a judge for everything else.
"""
from __future__ import annotations

import numbers
import random
from typing import Any

from jax.sharding import PartitionSpec

from helpers.exercises import forms
from helpers.exercises.core import Mistake, describe
from helpers.pictures.layout import format_index, format_spec, sharding_layout
from helpers.practice import mistakes as m
from helpers.practice.parse import parse_answer
from helpers.practice.question import KnownMistake, Question
from helpers.practice.scenario import DEVICES, Scenario, host_blocks, random_scenario, ways


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise Mistake(f"expected whole numbers, but got {describe(value)}")
    return int(value)


def _entries(sc: Scenario) -> list:
    return list(sc.spec) + [None] * (len(sc.shape) - len(sc.spec))


def _placed_setting(sc: Scenario) -> str:
    return f"An array of shape {sc.shape} is placed with NamedSharding(mesh, {format_spec(sc.spec)})."


def _variant_mistakes(sc: Scenario, answer_under, what: str) -> list[KnownMistake]:
    """The generic mistakes as answers of this kind: what the learner's answer would be
    if the spec were the variant; `answer_under(spec)` is None when JAX refuses it."""
    out = []
    for v in m.variants(sc.spec, sc.axis_names, len(sc.shape)):
        wrong = answer_under(v.spec)
        if wrong is not None:
            out.append(KnownMistake(wrong, v.family, f"that is {what} under {format_spec(v.spec)}: {v.why}"))
    return out


def _word(dim: int) -> str:
    return "rows" if dim == 0 else "columns"


def _element(index: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, index)) + "]"


# ------------------------------------------------------------------ which rows device k holds

def tile(rng: random.Random, seed: int) -> Question:
    """Which rows (or columns) does device k hold? Answer (start, stop)."""
    sc = random_scenario(rng)
    rank, entries = len(sc.shape), _entries(sc)
    split = [d for d in range(rank) if entries[d] is not None]
    dim = rng.choice(split) if split and rng.random() < 0.85 else rng.randrange(rank)
    device = rng.randrange(DEVICES)
    start, stop = sc.placement()[device][dim]
    n, size, word = sc.shape[dim], stop - start, _word(dim)

    def under(spec):
        placed = sc.placement(spec)
        return None if placed is None else placed[device][dim]

    candidates = _variant_mistakes(sc, under, f"what device {device} holds")
    slice_rule = (f"(start, stop) works like a Python slice: stop is one past the last of the {word}, "
                  f"so (2, 4) means {word} 2 and 3")
    candidates += [KnownMistake((start, stop - 1), m.OFF_BY_ONE, slice_rule),
                   KnownMistake((start, stop + 1), m.OFF_BY_ONE, slice_rule)]
    size_rule = (f"count the tile size again: dimension {dim} ({n} {word}) is cut into "
                 f"{n // size} tile{'s' if n // size > 1 else ''} of {size} {word}")
    for other in (size * 2, size // 2):
        first = start // size * other
        if 0 < other != size and first + other <= n:
            candidates.append(KnownMistake((first, first + other), m.TILE_SIZE, size_rule))

    normalize = forms.span(like=f"(0, 2) for {word} 0 and 1", word=word)

    def fallback(value):
        a, b = value
        if not 0 <= a < b <= n:
            return f"dimension {dim} has {n} {word}, so (start, stop) needs 0 <= start < stop <= {n}"
        if b - a != size:
            return f"{word} {a}:{b} are {b - a} {word}; {size_rule}"
        return (f"device {device} does not hold {word} {a}:{b}; find it in the mesh, then follow the mesh "
                f"axes that split dimension {dim}")

    return Question(
        seed, "tile", "which rows or columns a device holds", sc,
        ask=(f"Which {word} does device {device} hold? Answer (start, stop) like a slice: "
             f"(0, 2) means {word} 0 and 1."),
        answer=(start, stop), right=(start, stop), normalize=normalize, fallback=fallback,
        praise=lambda _a: f"device {device} holds {word} {start}:{stop}",
        setting=_placed_setting(sc), example="(0, 2)", mistakes=tuple(candidates))


# ------------------------------------------------------------------ which devices hold [i, j]

def holders(rng: random.Random, seed: int) -> Question:
    """Which devices hold element [i, j]? Answer a list of device ids."""
    sc = random_scenario(rng)
    rank = len(sc.shape)
    placed = sc.placement()
    sizes = [b - a for a, b in next(iter(placed.values()))]
    element = []
    for n, size in zip(sc.shape, sizes):
        starts = list(range(size, n, size))
        element.append(rng.choice(starts) if starts and rng.random() < 0.5 else rng.randrange(n))
    element = tuple(element)

    def holding(where, placement) -> list[int] | None:
        if placement is None:
            return None
        return sorted(d for d, idx in placement.items() if all(a <= i < b for i, (a, b) in zip(where, idx)))

    right = tuple(holding(element, placed))
    el = _element(element)
    candidates = _variant_mistakes(sc, lambda spec: holding(element, sc.placement(spec)),
                                   "who holds it")
    for dim in range(rank):
        for step in (-1, 1):
            near = list(element)
            near[dim] += step
            if 0 <= near[dim] < sc.shape[dim]:
                candidates.append(KnownMistake(holding(tuple(near), placed), m.OFF_BY_ONE,
                                          f"those devices hold {_element(near)}, its neighbour: a tile "
                                          "[start:stop] holds start up to stop - 1, not stop"))
        for other in (sizes[dim] * 2, sizes[dim] // 2):
            if 0 < other != sizes[dim]:
                thought = list(element)
                thought[dim] = element[dim] // other * sizes[dim]
                if thought[dim] < sc.shape[dim]:
                    candidates.append(KnownMistake(
                        holding(tuple(thought), placed), m.TILE_SIZE,
                        f"count the tile size again: along dimension {dim} the tiles have "
                        f"{sizes[dim]} {_word(dim)}"))
    copies_rule = ("some copies are missing: the mesh axes the spec leaves out make copies, and every "
                   "device holding a copy counts")
    if len(right) > 1:
        candidates.append(KnownMistake(list(right[:1]), m.SPLIT_COPIED, copies_rule))

    def normalize(answer):
        if isinstance(answer, numbers.Integral) or hasattr(answer, "platform"):
            answer = [answer]
        if isinstance(answer, (str, bytes, dict)) or not hasattr(answer, "__iter__"):
            raise Mistake(f"expected a list of device ids like [0, 4], but got {describe(answer)}")
        ids = {_whole(getattr(a, "id", a)) if hasattr(a, "platform") else _whole(a) for a in answer}
        if not ids:
            raise Mistake("name at least one device: every element is held by some device")
        if not ids <= set(range(DEVICES)):
            raise Mistake(f"the devices here are 0 to {DEVICES - 1}; {sorted(ids - set(range(DEVICES)))} "
                        "is not one of them")
        return tuple(sorted(ids))

    def fallback(value):
        extra = sorted(set(value) - set(right))
        if not extra:
            return copies_rule
        return (f"device {extra[0]} does not hold element {el}; find the tile that contains it, "
                "then every device that holds that tile")

    return Question(
        seed, "holders", "which devices hold an element", sc,
        ask=f"Which devices hold element {el}? Answer a list of device ids, like [0, 4].",
        answer=list(right), right=right, normalize=normalize, fallback=fallback,
        praise=lambda _a: f"element {el} is on device{'s' if len(right) > 1 else ''} "
                          f"{', '.join(map(str, right))}",
        setting=_placed_setting(sc), example="[0, 4]", mistakes=tuple(candidates))


# ------------------------------------------------------------------ global shape from host-local shapes

def global_shape(rng: random.Random, seed: int) -> Question:
    """Each host passes local data of one shape: what is the global shape? Answer a tuple."""
    while True:
        sc = random_scenario(rng)
        blocks = host_blocks(sc, sc.spec)
        if blocks is not None:
            break
    rank = len(sc.shape)
    local = tuple(g // b for g, b in zip(sc.shape, blocks))

    def under(spec):
        other = host_blocks(sc, spec)
        return None if other is None else tuple(n * b for n, b in zip(local, other))

    candidates = _variant_mistakes(sc, under, "the global shape")
    split_dims = [d for d in range(rank) if blocks[d] > 1]
    if split_dims:  # first: a variant spec may give the local shape too, and this names the slip itself
        candidates.insert(0, KnownMistake(local, m.SPLIT_COPIED,
                                       "that is one host's own shape, as if the hosts held copies: they hold "
                                       f"different parts of dimension {split_dims[0]}, so the global array is larger"))
    size_of = dict(zip(sc.axis_names, sc.axis_sizes))
    by_devices = tuple(n * ways(size_of, e) for n, e in zip(local, _entries(sc)))
    candidates.append(KnownMistake(by_devices, m.TILE_SIZE,
                              "that multiplies by the number of devices splitting each dimension; a host's "
                              "local array already holds the tiles of all its devices, so multiply by the "
                              "number of different host blocks instead"))
    example = "(8, 4)" if rank == 2 else "(8,)"

    def normalize(answer):
        if isinstance(answer, numbers.Integral) and rank == 1:
            answer = (answer,)
        if isinstance(answer, (str, bytes, dict)) or not hasattr(answer, "__len__") or len(answer) != rank:
            raise Mistake(f"expected the global shape as a tuple of {rank} whole number{'s' * (rank > 1)} "
                        f"like {example}, but got {describe(answer)}")
        return tuple(_whole(v) for v in answer)

    def fallback(value):
        for dim, (got, n) in enumerate(zip(value, local)):
            if got != sc.shape[dim]:
                if got < n or got % n:
                    return (f"dimension {dim}: the global size is the host-local size {n} times the number "
                            f"of different host blocks, so a multiple of {n}")
                return (f"dimension {dim}: {got} would mean {got // n} different host blocks; see which hosts "
                        f"hold the same {_word(dim)} (copies) and which hold different ones")
        return "that is not the global shape"

    return Question(
        seed, "global_shape", "the global shape from host-local shapes", sc,
        ask=(f"Each of the {sc.hosts} hosts calls jax.make_array_from_process_local_data(sharding, local) "
             f"with its own `local` of shape {local}. What is the global shape? Answer a tuple like {example}."),
        answer=sc.shape, right=sc.shape, normalize=normalize, fallback=fallback,
        praise=lambda _a: f"{sc.hosts} hosts with local shape {local} make a global array of shape {sc.shape}",
        setting=f"sharding = NamedSharding(mesh, {format_spec(sc.spec)})", example=example,
        mistakes=tuple(candidates))


# ------------------------------------------------------------------ how many copies of each tile

def copies(rng: random.Random, seed: int) -> Question:
    """How many devices hold each tile? Answer a whole number."""
    sc = random_scenario(rng)

    def count(spec):
        placed = sc.placement(spec)
        return None if placed is None else DEVICES // len(set(placed.values()))

    right = count(sc.spec)
    tiles = DEVICES // right
    candidates = _variant_mistakes(sc, count, "the count")
    candidates.append(KnownMistake(tiles, m.COUNTING, "that is the number of tiles (different blocks); the "
                                                 "question is how many devices hold each one"))
    rule = "each tile is copied along the mesh axes the spec leaves out: multiply their sizes"

    normalize = forms.whole("how many devices hold each tile, like 2")

    def fallback(value):
        if not 1 <= value <= DEVICES:
            return f"every tile is on at least 1 and at most {DEVICES} devices; {rule}"
        return rule

    return Question(
        seed, "copies", "how many copies of each tile", sc,
        ask="How many devices hold each tile (each distinct block) of this array? Answer a whole number.",
        answer=right, right=right, normalize=normalize, fallback=fallback,
        praise=lambda _a: f"each of the {tiles} tile{'s' * (tiles > 1)} is on {right} device{'s' * (right > 1)}",
        setting=_placed_setting(sc), example="2", mistakes=tuple(candidates))


# ------------------------------------------------------------------ which spec draws this picture

def _frozen(placement: dict) -> tuple:
    return tuple(sorted(placement.items()))


def picture_text(sc: Scenario) -> str:
    """Every device's part of the array, host by host, and the tile count: no spec shown."""
    layout = sharding_layout(sc.shape, sc.mesh, sc.spec, host_of=sc.host_of)
    lines = [f"An array of shape {sc.shape} is placed like this:"]
    for host in range(sc.hosts):
        parts = [f"dev {d.id} {format_index(layout.placement[d], sc.shape)}"
                 for d in layout.devices if sc.host_of(d) == host]
        lines.append(f"host {host}: " + "  ".join(parts))
    lines.append(layout.summary())
    return "\n".join(lines)


def spec(rng: random.Random, seed: int) -> Question:
    """Which P(...) draws this picture? Any spec with the same placement is right."""
    sc = random_scenario(rng)
    right = _frozen(sc.placement())
    candidates = []
    for v in m.variants(sc.spec, sc.axis_names, len(sc.shape)):
        if sc.placement(v.spec) is not None:
            candidates.append(KnownMistake(v.spec, v.family, v.why_spec))

    def normalize(answer):
        if isinstance(answer, str):
            answer = parse_answer(answer)
        if not isinstance(answer, PartitionSpec):
            raise Mistake(f"expected a PartitionSpec like P('host', None), but got {describe(answer)}")
        try:
            layout = sharding_layout(sc.shape, sc.mesh, answer, host_of=sc.host_of)
        except ValueError as error:
            raise Mistake(str(error).rstrip(".")) from None
        return _frozen({d.id: idx for d, idx in layout.placement.items()})

    def fallback(value):
        theirs, mine = dict(value), dict(right)
        n_theirs, n_mine = len(set(theirs.values())), len(set(mine.values()))
        if n_theirs != n_mine:
            return (f"your spec makes {n_theirs} tile{'s' * (n_theirs > 1)}, each on {DEVICES // n_theirs} "
                    f"device{'s' * (n_theirs < DEVICES)}; the picture has {n_mine}, each on {DEVICES // n_mine}")
        device = next(d for d in sorted(mine) if theirs[d] != mine[d])
        return (f"your spec makes as many tiles and copies, but puts them elsewhere: device {device} gets "
                f"{format_index(theirs[device], sc.shape)}, the picture shows {format_index(mine[device], sc.shape)}")

    def praise(answer):
        text = answer if isinstance(answer, str) else format_spec(answer)
        same = "" if text == format_spec(sc.spec) else f" (as does {format_spec(sc.spec)})"
        return f"{text} draws this picture{same}"

    return Question(
        seed, "spec", "the spec that draws this picture", sc,
        ask=("Which PartitionSpec places the array like this? Answer P(...); any spec that places the same "
             "is right."),
        answer=sc.spec, right=right, normalize=normalize, fallback=fallback, praise=praise,
        setting=picture_text(sc), example="P('host', None)", mistakes=tuple(candidates))


KINDS = {"tile": tile, "holders": holders, "global_shape": global_shape, "copies": copies, "spec": spec}


def drill(seed: int | None = None, kind: str | None = None) -> Question:
    """The drill question of this seed (a fresh random one without a seed); `kind` picks its kind."""
    if seed is None:
        seed = random.SystemRandom().randrange(100_000)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, like drill(7); got {seed!r}")
    if kind is not None and kind not in KINDS:
        raise ValueError(f"no drill kind {kind!r}; the kinds are {', '.join(map(repr, KINDS))}")
    rng = random.Random(seed)
    natural = rng.choice(list(KINDS))
    return KINDS[kind or natural](rng, seed)


def drills(first_seed: int, count: int, kind: str | None = None) -> list[Question]:
    """A set of questions to hand out: the drills of seeds first_seed .. first_seed + count - 1."""
    return [drill(first_seed + i, kind) for i in range(count)]
