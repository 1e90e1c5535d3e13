"""The rules for per-device randomness in a pmap-era script: keys split once per local device (the same split on
every host), and draws inside the pmapped step from a key each device had of its own.

Each rule reads a `Script` and yields (node, rule name, what the line does on several hosts, what to write
instead); `LESSONS` names the notebook section that teaches each rule's fix.
"""
from __future__ import annotations

import ast
import re
from typing import Iterator

from helpers.migrate.bindings import bound_value, device_count_of, host_index_in, reaches
from helpers.migrate.feeds import fed_to_pmap
from helpers.migrate.reach import pmapped_bodies, pmapped_out_of_view, run_under_pmap
from helpers.migrate.script import MESH_AXES, Script, argument, code_of, is_name, keyword

# rule -> (notebook, section heading without its number): where the course teaches the fix
LESSONS: dict[str, tuple[str, str]] = {
    "per-device-keys": ("06", "Per-device randomness: `fold_in(key, axis_index)`"),
    "pmap-body-keys": ("06", "Per-device randomness: `fold_in(key, axis_index)`"),
    "per-host-init": ("10", "Initialisation across hosts, in real processes"),
}


def splits_per_device(s: Script, call: ast.AST) -> bool:
    """`jax.random.split(key, jax.local_device_count())` (or a count named for the devices, or a multiple of it:
    `n_devices * batch`, `3 + 2 * n_local`, so many keys a device), or a project's wrapper of it
    (`split_key(key, num=n_local_devices)`)."""
    count = _less_a_constant(_split_count(s, call)) if isinstance(call, ast.Call) else None
    if isinstance(count, ast.BinOp) and isinstance(count.op, ast.Mult):
        return any(_counts_devices(s, side) for side in (count.left, count.right) if not isinstance(side, ast.BinOp))
    return count is not None and not isinstance(count, ast.BinOp) and _counts_devices(s, count)  # not `envs // n`


def in_key_split_counts(s: Script) -> set[ast.AST]:
    """The nodes of the counts of the script's splits into keys a device (`2 * n_local` in `split(key, 3 + 2 *
    n_local)`): a count of keys, not of a batch's rows."""
    return {n for call in s.calls if splits_per_device(s, call) for n in ast.walk(_split_count(s, call))}


def _counts_devices(s: Script, count: ast.AST) -> bool:
    """A count of devices: jax's, a name bound to one, or a name that says so (`n_dev`)."""
    return any(isinstance(n, ast.Call) and is_name(s.name(n.func), "jax.local_device_count", "jax.device_count")
               for n in ast.walk(count)) or bool(re.search(r"dev", code_of(count))) \
        or device_count_of(s, count) is not None  # a name bound to a count (`n_local = jax.local_device_count()`)


def _less_a_constant(count: ast.AST | None) -> ast.AST | None:
    """A split's count without a constant added or taken (`jax.local_device_count() + 1`, `3 + 2 * n_local`: keys
    per device and some to keep)."""
    while isinstance(count, ast.BinOp) and isinstance(count.op, (ast.Add, ast.Sub)):
        if isinstance(count.right, ast.Constant):
            count = count.left
        elif isinstance(count.left, ast.Constant) and isinstance(count.op, ast.Add):
            count = count.right
        else:
            break
    return count


def _split_count(s: Script, call: ast.Call) -> ast.AST | None:
    """How many keys a split makes: jax.random.split's second argument, the count handed to a project's
    `split_key(key, num=...)` / `split_rng(rng, n)` (a function named for splitting keys), or to haiku's
    `PRNGSequence.take(n)`; None for other calls."""
    name = s.name(call.func)
    if isinstance(call.func, ast.Attribute) and call.func.attr == "take" and len(call.args) == 1:
        stream = s.value(call.func.value)  # haiku's `hk.PRNGSequence(seed).take(n)`: n keys off a key stream
        return call.args[0] if isinstance(stream, ast.Call) and is_name(s.name(stream.func), "haiku.PRNGSequence") \
            else None
    short = name.rsplit(".", 1)[-1].lower()
    wrapper = not name.startswith(("jax.", "flax.")) and "split" in short and re.search(r"key|rng", short)
    if not (is_name(name, "jax.random.split") or wrapper):
        return None
    if len(call.args) > 1:
        return call.args[1]
    return next((k.value for k in call.keywords if k.arg in ("num", "n", "count", "num_keys")), None)


def _splits_fed_to_pmap(s: Script) -> set[ast.Call]:
    """Splits to a count named otherwise (`split(key, num=DEVICE_COUNT)`, DEVICE_COUNT = 8) whose keys a pmapped call
    takes whole, as its argument or through a name last bound to one (and the name's other splits in its function,
    as a loop splits its keys again): pmap strips their leading axis, so there is one key a local device."""
    def split(value: ast.AST | None) -> bool:
        return isinstance(value, ast.Call) and _split_count(s, value) is not None

    found = set()
    for fed in fed_to_pmap(s):
        if split(fed):
            found.add(fed)
        elif isinstance(fed, ast.Name) and split(bound_value(s, fed)):
            found |= {node.value for node in ast.walk(s.scope(fed)) if isinstance(node, ast.Assign)
                      and [code_of(t) for t in node.targets] == [fed.id] and split(node.value)}
    return found


def _per_device_keys(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    fed = _splits_fed_to_pmap(s)
    for call in s.calls:
        if splits_per_device(s, call) or call in fed:
            count = _split_count(s, call)
            every = any(isinstance(n, ast.Call) and is_name(s.name(n.func), "jax.device_count")
                        for n in ast.walk(s.value(count)))
            split = f"{code_of(call.func)}({code_of(count)})" if _split_key(s, call) is not argument(call, 0, "key") \
                else f"{_split_name(s, call)}(key, {code_of(count)})"
            key = _split_key(s, call)
            if key is not None and _folds_in_the_host(s, key):
                said = "; the key folds in jax.process_index(), so each host's keys differ, but the port keeps one key"
            elif key is not None and host_index_in(s, key) is not None:
                said = ("; the key is made from jax.process_index(), so each host's keys differ, but the port keeps "
                        "one key")
            elif every:
                said = (", the same keys on every host: a host that feeds pmap its local_device_count() of them must "
                        "take its own slice, or its devices repeat another host's draws")
            else:
                said = "; every host splits the same key, so host 1's devices repeat host 0's draws"
            many = "keys for each" if isinstance(_less_a_constant(count), ast.BinOp) else "one key per"  # `n * envs`
            yield (call, "per-device-keys",
                   (f"{split} makes {many} device of every host (jax.device_count() counts them all)" if every
                    else f"{split} makes {many} local device for pmap") + said,
                   "one key, and inside shard_map jax.random.fold_in(key, jax.lax.axis_index("
                   f"{MESH_AXES})): a different stream on every device of every host")


def _per_device_split_key(s: Script, call: ast.Call) -> ast.AST | None:
    """The key a call splits one a local device: jax.random.split to a device count, flax's shard_prng_key, or a
    project helper named for a key per device; None for other calls."""
    name = s.name(call.func)
    if splits_per_device(s, call):
        return _split_key(s, call)
    if _names_a_key_per_device(name) or is_name(name, "flax.training.common_utils.shard_prng_key"):
        return call.args[0] if call.args else None
    return None


def _names_a_key_per_device(name: str) -> bool:
    """A project helper named for a key per device: `utils.make_different_rng_key_on_all_devices`."""
    short = name.rsplit(".", 1)[-1].lower()
    return bool(name) and not name.startswith(("jax.", "flax.")) and bool(re.search(r"rng|key", short)) \
        and "device" in short


def _host_folded_before_the_split(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """`rng = fold_in(rng, jax.process_index())` (or `PRNGKey(seed + jax.process_index())`) on a line of its own,
    whose key is then split one a local device: keys made per host and then per device, which the port replaces by
    one key and fold_in(key, axis_index) inside the step (a key that also initialises weights is per-host-init's)."""
    if not s.pmaps_here():
        return
    inits = {host for call in s.calls for key in _init_keys(s, call) if (host := host_index_in(s, key)) is not None}
    seen = set()
    for call in s.calls:
        key = _per_device_split_key(s, call)
        host = host_index_in(s, key) if key is not None else None
        if host is None or host.lineno == call.lineno or host in inits or host.lineno in seen:
            continue
        seen.add(host.lineno)
        yield (host, "per-device-keys",
               f"{code_of(host)} makes this host's key, which line {call.lineno} then splits one a local device: "
               "pmap's keys, told apart per host by hand",
               "one key for every host, and inside shard_map jax.random.fold_in(key, jax.lax.axis_index("
               f"{MESH_AXES})): a different stream on every device of every host")


def _split_key(s: Script, call: ast.Call) -> ast.AST | None:
    """The key a split splits: its first argument (`jax.random.split(key=k, num=n)` too), or the seed of the haiku
    key stream a `take` draws from."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "take":
        stream = s.value(call.func.value)
        return stream.args[0] if isinstance(stream, ast.Call) and stream.args else None
    return argument(call, 0, "key")


def _split_name(s: Script, call: ast.Call) -> str:
    """`jax.random.split` however the script spells it; a project's wrapper as written."""
    return "jax.random.split" if is_name(s.name(call.func), "jax.random.split") else code_of(call.func)


def _key_per_device_helpers(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A project helper named for a key per device (`utils.make_different_rng_key_on_all_devices(key)`), or kfac_jax's
    `p_split` (its lineage's too), in a script that uses pmap: a host-local stack of keys, one per local device, that
    pmap strips."""
    if not s.pmaps_here(nnx=False):
        return
    for call in s.calls:
        name = s.name(call.func)
        short = name.rsplit(".", 1)[-1].lower()
        if _names_a_key_per_device(name) or name and not name.startswith(("jax.", "flax.")) and short == "p_split":
            yield (call, "per-device-keys",
                   f"{code_of(call.func)}(...) makes a key per local device (a project helper"
                   + (": kfac_jax's p_split, a pmap of jax.random.split over the stack of keys" if short == "p_split"
                      else "") + "), the host-local stack of keys pmap strips; after the port the keys are one "
                   "global value",
                   "one key, and inside shard_map jax.random.fold_in(key, jax.lax.axis_index("
                   f"{MESH_AXES})): a different stream on every device of every host")


def _folds_in_the_host(s: Script, key: ast.AST) -> bool:
    """The key is made with jax.process_index() folded in (`fold_in(key, jax.process_index())`), through names."""
    return reaches(s, key, lambda n: isinstance(n, ast.Call) and is_name(s.name(n.func), "jax.random.fold_in")
                   and any(_reads_the_host(s, a) for a in n.args[1:])) is not None


def _reads_the_host(s: Script, node: ast.AST) -> bool:
    """`jax.process_index()` (or `jax.host_id()`), in the expression or the name it is assigned from."""
    return any(isinstance(n, ast.Call) and is_name(s.name(n.func), "process_index", "host_id")
               for n in ast.walk(s.value(node)))


_KEY_MAKERS = ("jax.random.key", "jax.random.PRNGKey", "jax.random.wrap_key_data")


def _draws_from_a_passed_key(s: Script, call: ast.Call) -> bool:
    """A jax.random call on a key the function was given: not a key made on the spot (`jax.random.key(0)`,
    the same on every device under pmap and after the port), nor a draw from one."""
    if not s.name(call.func).startswith("jax.random.") or is_name(s.name(call.func), *_KEY_MAKERS):
        return False
    key = s.value(call.args[0]) if call.args else None
    return not (isinstance(key, ast.Call) and is_name(s.name(key.func), *_KEY_MAKERS))


def _pmap_body_keys(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    reached, unseen = run_under_pmap(s), pmapped_out_of_view(s)
    for function in pmapped_bodies(s):
        if _initialises(function):
            continue  # under pmap an init draws the same parameters on every device, as a P() port must
        calls = [n for n in ast.walk(function) if isinstance(n, ast.Call)]
        if any(is_name(s.name(c.func), "jax.lax.axis_index") for c in calls) or _binds_keys_in_a_helper(s, function):
            continue
        where, uses = function.name, _first_draw_of_each_key(s, function, function in unseen)
        uses = uses or _uses_of_per_device_keys(s, function)
        for runs in sorted((f for f, top in reached.items() if top is function), key=lambda f: f.lineno):
            if uses:
                break
            if not _initialises(runs) and not _binds_keys_in_a_helper(s, runs) and not any(
                    isinstance(c, ast.Call) and is_name(s.name(c.func), "jax.lax.axis_index") for c in ast.walk(runs)):
                where, uses = f"{runs.name} (which {function.name} calls)", _first_draw_of_each_key(
                    s, runs, function in unseen)
        runner = "a pmap this file does not show runs (a framework's or another module's)" \
            if function in unseen and not set(unseen[function]) & s.pmap_axes else "pmap runs"
        for use in uses:
            yield (use, "pmap-body-keys",
                   f"{_spelled(use)} inside {where}, which {runner}: under pmap each device had a "
                   "key of its own (split per local device before the step); with one replicated key every "
                   "device draws the same numbers",
                   f"keep one key and fold each device's position into it: jax.random.fold_in(key, "
                   f"jax.lax.axis_index({MESH_AXES}))")


def _first_draw_of_each_key(s: Script, function: ast.AST, unseen: bool = False) -> list[ast.Call]:
    """The function's first draw from each key it is handed (`split(dropout_rng)` and `split(gumbel_rng)`: two keys;
    a draw from a key split off one of them is the same key's stream; a model's apply handed the key in training,
    `model.apply(params, x, rngs={'dropout': rng})`, draws too, from a key the function also draws from itself, or
    any key in a body pmapped out of view (`unseen`), whose keys come from that pmap); its first draw where no key is
    a parameter."""
    params = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    draws = sorted(((c, argument(c, 0, "key")) for c in ast.walk(function) if isinstance(c, ast.Call)
                    and _draws_from_a_passed_key(s, c)), key=lambda d: (d[0].lineno, d[0].col_offset))
    drawn = {_key_origin(s, k) for _, k in draws}
    applies = [(c, k) for c in ast.walk(function) if isinstance(c, ast.Call) for k in _keys_applied(s, c, params)
               if unseen or _key_origin(s, k) in drawn]
    first: dict[str, ast.Call] = {}
    for draw, key in sorted([*draws, *applies], key=lambda d: (d[0].lineno, d[0].col_offset)):
        origin = _key_origin(s, key)
        if origin in params:
            first.setdefault(origin, draw)
    return sorted(first.values(), key=lambda c: (c.lineno, c.col_offset)) or [d for d, _ in draws[:1]]


_EVALUATION = {"is_training": False, "training": False, "train": False, "deterministic": True}


def _keys_applied(s: Script, call: ast.Call, params: set[str]) -> list[ast.AST]:
    """The keys a model's `apply` is handed (a name, or the values of `rngs={...}`) that come from the function's
    parameters; none in evaluation (`is_training=False`, `deterministic=True`, `training_mode=...EVAL`), which draws
    nothing."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "apply"):
        return []
    for k in call.keywords:
        if k.arg in _EVALUATION and isinstance(k.value, ast.Constant) and k.value.value is _EVALUATION[k.arg] \
                or k.arg and "mode" in k.arg and re.search(r"\bEVAL", code_of(k.value)):
            return []
    handed = [*call.args, *(k.value for k in call.keywords if k.arg not in ("rngs",))]
    handed += [v for k in call.keywords if k.arg == "rngs" and isinstance(k.value, ast.Dict) for v in k.value.values]
    handed += [k.value for k in call.keywords if k.arg == "rngs" and isinstance(k.value, ast.Name)]
    return [a for a in handed if isinstance(a, ast.Name) and re.search(r"rng|key", a.id, re.I)
            and _key_origin(s, a) in params]


def _spelled(use: ast.AST) -> str:
    """A draw as written, a model's apply cut to its callee (`self.forward.apply(...)`)."""
    if isinstance(use, ast.Call) and isinstance(use.func, ast.Attribute) and use.func.attr == "apply":
        return f"{code_of(use.func)}(...)"
    return code_of(use)


def _key_origin(s: Script, key: ast.AST | None) -> str | None:
    """The name a key comes from, back through the splits and unpackings that made it (`rng` of `rng, sub =
    jax.random.split(rng)`; `state` of `rng, params = state`): a parameter, or a name nothing binds."""
    for _ in range(12):
        while isinstance(key, ast.Subscript):
            key = key.value
        if isinstance(key, ast.Call) and s.name(key.func).startswith("jax.random.") and key.args:
            key = key.args[0]
            continue
        if not isinstance(key, ast.Name):
            return None
        bound = bound_value(s, key)
        if bound is None or any(n is key for n in ast.walk(bound)):  # unbound, or read before its first binding
            return key.id
        key = bound
    return None


def _initialises(function: ast.FunctionDef) -> bool:
    """A function that makes the initial parameters (`model_init`, `init_state`): the same key on every device,
    on purpose, so that every device draws the same parameters."""
    return bool(re.search(r"(^|_)init", function.name.lower()))


def _binds_keys_in_a_helper(s: Script, function: ast.FunctionDef) -> bool:
    """A key drawn in the function is handed with pmap's axis name to a helper that binds it to each device
    (`bind_rng_to_host_device(rng, axis_name='batch')`: a fold_in of axis_index inside)."""
    keys = {n.id for node in ast.walk(function) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
            and s.name(node.value.func).startswith("jax.random.")
            for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return any(isinstance(c, ast.Call) and set(s.axis_names(keyword(c, "axis_name"))) & s.pmap_axes
               and any(isinstance(a, ast.Name) and a.id in keys for a in c.args) for c in ast.walk(function))


def _uses_of_per_device_keys(s: Script, function: ast.FunctionDef) -> list[ast.Name]:
    """Where a pmapped function first reads a parameter its callers pass keys split per local device to
    (`p_step(batch, keys)` with `keys = jax.random.split(key, n_devices)`), handed on to a sampler or a model."""
    keys = {name for name, value in s.assigned.items() if splits_per_device(s, value) or (
        isinstance(value, ast.Call) and is_name(s.name(value.func), "flax.training.common_utils.shard_prng_key"))}
    params = [a.arg for a in function.args.args]
    callers = {}  # name of the pmapped step -> the parameters its positional arguments fill
    for name, value in s.assigned.items():
        if value in set(s.pmaps()) and s.pmap_target(value) == function.name:
            bound = value.args[0].args[1:] if value.args and isinstance(value.args[0], ast.Call) else []
            callers[name] = params[len(bound):]  # after the arguments a partial(f, ...) fixed
    fed = set()
    for call in s.calls:
        if isinstance(call.func, ast.Name) and call.func.id in callers:
            free = callers[call.func.id]
            fed |= {free[i] for i, a in enumerate(call.args[:len(free)]) if isinstance(a, ast.Name) and a.id in keys}
            fed |= {k.arg for k in call.keywords if isinstance(k.value, ast.Name) and k.value.id in keys}
    return sorted((n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id in fed
                   and isinstance(n.ctx, ast.Load)), key=lambda n: (n.lineno, n.col_offset))


def _per_host_init(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    """An initialisation whose key has jax.process_index() in its history: each host draws its own weights, which
    pmap's per-host replicate kept apart; a port's P() parameters must be the same on every host."""
    for call in s.calls:
        for key in _init_keys(s, call):
            host = host_index_in(s, key)
            if host is not None:
                yield (call, "per-host-init",
                       f"{code_of(call.func)}(...) initialises from {code_of(key)}, a key made with "
                       f"jax.process_index() (line {host.lineno}): each host starts from weights of its own (pmap's "
                       "replicate copied each host's own to its local devices)",
                       "initialise from a key without the process index (split the init key off before folding the "
                       "host in, or a seed every host shares), so that the P() parameters are the same on every "
                       "host; keep the per-host key for data order or dropout")
                break


def _init_keys(s: Script, call: ast.Call) -> list[ast.AST]:
    """The keys an initialisation is handed: `model.init(rng, x)`, `init_params(key=k)`, `get_model(..., init_rng)`
    (a call named for init, or a key named for it); none for jax's own calls and an optimizer's `init(params)`."""
    name = s.name(call.func)
    if not name or name.startswith("jax."):
        return []
    keys = [(code_of(a), a) for a in call.args] + [(f"{k.arg}={code_of(k.value)}", k.value) for k in call.keywords]
    named = re.search(r"init", name.rsplit(".", 1)[-1], re.I)
    return [key for said, key in keys if re.search(r"key|rng", said, re.I)
            and (named or re.search(r"init|param", said, re.I))]


RULES = (_per_device_keys, _pmap_body_keys, _key_per_device_helpers, _per_host_init, _host_folded_before_the_split)
