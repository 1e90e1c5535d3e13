"""Section 13: the migration assistant on pmap-era scripts in published styles, against hand labels.

tests/migrate_corpus/ holds scripts written for the course in the styles of published training code
(Hugging Face's Flax examples, Flax's ImageNet example, a ViT trainer, the nnx.pmap example of Flax's
randomness guide, the program of google/flax#4751, an xmap/pjit-era model-parallel trainer). Beside
each, `NAME.labels` lists the lines a port to jax.shard_map across hosts must change or think about,
with the kind of finding each needs (a rule of helpers.migrate; `pmap-collective:trap` for a pmean of
gradients, `pmap-collective:rename` for any other collective over pmap's axis), and `NAME_ported.py`
is the script ported. A finding's kind is its rule, `:trap` or `:rename` for pmap-collective.

- recall: the labelled (line, kind) pairs the tool found;
- precision: the tool's (line, kind) pairs that are labelled;
- wrong advice: a finding on a labelled line of a kind the label does not name (the worst case: a
  rename where the gradient trap is);
- the ported script must get no finding.

Held-out published scripts (`HELDOUT=set4=/path[:set3=/path ...] make bench-migrate`): folders of published
pmap-era scripts (.py, or a notebook as .md/.ipynb) that the course does not ship, each with NAME.labels beside it
whose first line is `# REPO PATH @ COMMIT`, labelled by hand before the tool was run on them. They are scored the
same way, without ports; with `HELDOUT_BEFORE=REV[,REV...]`, also by the tool as it was at each of those git
revisions. Their code stays out of the repository; their scores do not: each set measured is kept as
`benchmarks/heldout/NAME.json` (lines, kinds and sources, no code), and the section shows every kept set, with the
words written about it in `NAME.md` (before and after the line `<!-- table -->`), so a machine without the folders
re-renders them all.
"""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from benchmarks.measure import ROOT, log
from benchmarks.runs import source_commit
from benchmarks.tables import md_table
from helpers.migrate import migrate

KEY = "migrate"
TITLE = "The migration assistant on pmap-era scripts in published styles"
CORPUS = ROOT / "tests" / "migrate_corpus"
HELDOUT_KEPT = ROOT / "benchmarks" / "heldout"  # each held-out set's scores: NAME.json, and NAME.md about it
TABLE_MARK = "<!-- table -->"
HELDOUT_INTRO = (
    "**Held-out published scripts**: folders outside the repository (published code is never committed), each "
    "script labelled by hand before the tool was run on it. Right advice is a labelled (line, kind) the tool "
    "found; wrong advice a finding of another kind on a labelled line; a both-outcomes finding (\"if this is a "
    "gradient ... otherwise rename\") counts as right against a trap or a rename label. Column unseen: the score "
    "by the tool of the revision the script was labelled after (its labels' `fresh at`), before any rule it led "
    "to; blank for the scripts the first rules were written from. Each set's scores are kept in "
    "`benchmarks/heldout/`, so this section shows them on any machine.")


def scripts() -> list[Path]:
    """The corpus's labelled scripts (each has NAME.labels and NAME_ported.py beside it)."""
    return sorted(p.with_suffix(".py") for p in CORPUS.glob("*.labels"))


def labels(script: Path) -> set[tuple[int, str]]:
    """(line, kind) pairs of a script's label file: `LINE KIND [KIND ...] -- note` per line."""
    pairs = set()
    for line in script.with_suffix(".labels").read_text().splitlines():
        fields = line.split("--")[0].split()
        if fields and not fields[0].startswith("#"):
            pairs |= {(int(fields[0]), kind) for kind in fields[1:]}
    return pairs


EITHER = "pmap-collective:either"
BOTH = ("pmap-collective:trap", "pmap-collective:rename")


def kind(rule: str, does: str) -> str:
    """A finding's rule, with pmap-collective told apart: the gradient trap, a rename, or both outcomes ("this may
    be a gradient: if it is, drop it ... otherwise rename the axis"), safe advice whichever the line is."""
    if rule != "pmap-collective":
        return rule
    if "this may be a gradient" in does:
        return EITHER
    return "pmap-collective:" + ("trap" if "N times too large" in does else "rename")


def _as_labelled(got: set[tuple[int, str]], want: set[tuple[int, str]]) -> set[tuple[int, str]]:
    """A both-outcomes finding counts as the trap or the rename its line is labelled with (right either way);
    on a line labelled neither it stays as it is."""
    return {next(((line, k) for k in BOTH if (line, k) in want), (line, found)) if found == EITHER else (line, found)
            for line, found in got}


def _found(script: Path) -> set[tuple[int, str]]:
    return {(f.line, kind(f.rule, f.does)) for f in migrate(as_read(script), show=False)}


def as_read(script: Path) -> Path:
    """The file the tool reads for a held-out script: its copy inside its project (`# project: projects/NAME/PATH`
    in its labels: the same bytes, with the project modules it imports beside it), else the script itself."""
    found = re.search(r"^# project: (\S+)", script.with_suffix(".labels").read_text(), re.MULTILINE)
    copy = script.parent / found.group(1) if found else None
    return copy if copy is not None and copy.is_file() and copy.read_bytes() == script.read_bytes() else script


def _score(script: Path, got: set[tuple[int, str]]) -> dict:
    """Recall, precision and wrong advice of a script's (line, kind) findings against its labels."""
    want = labels(script)
    either = sum(1 for _, k in got if k == EITHER)
    got = _as_labelled(got, want)
    labelled_lines = {line for line, _ in want}
    wrong = sorted(pair for pair in got - want if pair[0] in labelled_lines)
    return {"script": script.name, "labelled": len(want), "found": len(got & want),
            "recall": len(got & want) / len(want), "precision": len(got & want) / len(got) if got else 1.0,
            "missed": sorted(want - got), "extra": sorted(got - want), "wrong": wrong, "either": either}


def score(script: Path) -> dict:
    """Recall, precision and wrong advice of the tool on one corpus script, and its findings on the port."""
    ported = script.with_name(script.stem + "_ported.py")
    return _score(script, _found(script)) | {"ported_findings": [str(f) for f in migrate(ported, show=False)]}


def heldout_scripts(folder: Path) -> list[Path]:
    """The labelled scripts of a held-out folder: NAME.labels beside NAME.py, NAME.md or NAME.ipynb."""
    return sorted(script for labelled in folder.glob("*.labels") for suffix in (".py", ".md", ".ipynb")
                  if (script := labelled.with_suffix(suffix)).exists())


def source(script: Path) -> str:
    """Where a held-out script was published: the first line of its labels, `# REPO PATH @ COMMIT`."""
    return script.with_suffix(".labels").read_text().splitlines()[0].lstrip("# ").strip()


def fresh_at(script: Path) -> str | None:
    """The revision whose rules were written before this script was labelled (`# note: fresh at REV: ...`)."""
    found = re.search(r"^# note: fresh at (\w+)", script.with_suffix(".labels").read_text(), re.MULTILINE)
    return found.group(1) if found else None


def findings_at(revision: str, scripts: list[Path]) -> list[set[tuple[int, str]]]:
    """Each script's (line, kind) findings by helpers.migrate as it was at a git revision, run from a
    copy of that revision's package in a fresh interpreter (none where that tool crashed on the script)."""
    archive = subprocess.run(["git", "archive", revision, "helpers/__init__.py", "helpers/migrate"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    code = ("import json, sys\nfrom helpers.migrate import migrate\n"
            "def read(p):\n"
            "    try:\n        return [(f.line, f.rule, f.does) for f in migrate(p, show=False)]\n"
            "    except Exception:\n        return []  # the tool of that revision crashed on it: no finding\n"
            "print(json.dumps([read(p) for p in sys.argv[1:]]))")
    with tempfile.TemporaryDirectory() as old:
        tarfile.open(fileobj=io.BytesIO(archive)).extractall(old, filter="data")
        read = [str(as_read(s)) for s in scripts]
        out = subprocess.run([sys.executable, "-c", code, *read], cwd=old, capture_output=True,
                             text=True, check=True, env={**os.environ, "PYTHONPATH": old}).stdout
    return [{(line, kind(rule, does)) for line, rule, does in found} for found in json.loads(out)]


def score_heldout(folder: Path, before: tuple[str, ...] = ()) -> dict:
    """Each held-out script scored by the tool now, and by the tool at each revision of `before`."""
    scripts = heldout_scripts(folder)
    rows = [_score(s, _found(s)) | {"source": source(s), "fresh_at": fresh_at(s), "before": []} for s in scripts]
    for revision in before:
        for row, script, got in zip(rows, scripts, findings_at(revision, scripts)):
            row["before"].append(_score(script, got))
    return {"folder": str(folder), "before": list(before), "scripts": rows}


def measure(results, opts) -> None:
    log(f"migrate: {len(scripts())} labelled scripts of {CORPUS.relative_to(ROOT)}")
    results.sections[KEY] = {"scripts": [score(s) for s in scripts()]}
    before = tuple(r for r in os.environ.get("HELDOUT_BEFORE", "").split(",") if r)
    measured = []
    for name, folder in heldout_sets(os.environ.get("HELDOUT", "")):
        if not heldout_scripts(folder):
            log(f"migrate: no labelled scripts in {folder}; held-out set {name} kept as it was")
            continue
        log(f"migrate: held-out set {name}: {len(heldout_scripts(folder))} scripts in {folder}")
        record = score_heldout(folder, before) | {"name": name or folder.name, "commit": source_commit()}
        if name:  # a named set is kept: the section shows it on any machine from now on
            HELDOUT_KEPT.mkdir(exist_ok=True)
            (HELDOUT_KEPT / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        measured.append(record)
    results.sections[KEY]["heldout"] = measured


def heldout_sets(spec: str) -> list[tuple[str, Path]]:
    """`NAME=FOLDER[:NAME=FOLDER ...]` as (name, folder) pairs; a bare folder's name is "" (measured, not kept)."""
    return [(name, Path(folder)) for name, _, folder in
            (entry.rpartition("=") for entry in filter(None, spec.split(os.pathsep)))]


def render(results) -> str:
    rows = results.sections[KEY]["scripts"]
    labelled, found = sum(r["labelled"] for r in rows), sum(r["found"] for r in rows)
    table = md_table(["script", "labelled", "found", "recall", "precision", "wrong advice", "findings on the port"],
                     [[f"`{r['script']}`", str(r["labelled"]), str(r["found"]), f"{r['recall']:.0%}",
                       f"{r['precision']:.0%}", str(len(r["wrong"])), str(len(r["ported_findings"]))]
                      for r in rows])
    missed = [f"`{r['script']}` line {line} ({k})" for r in rows for line, k in r["missed"]]
    return (table + f"\n\nAll together: {found} of {labelled} labelled lines found "
            f"({found / labelled:.0%}). "
            + (f"Missed: {', '.join(missed)}. " if missed else "Nothing missed. ")
            + "The scripts, their labels and their ports are in `tests/migrate_corpus/`; "
            "`tests/test_migrate.py` holds recall at 95% or more, no wrong advice and no finding on a port. "
            "The corpus was written together with the rules it measures: published scripts the rules have "
            "not seen are the fairer test.\n\n" + render_heldout_sets(results.sections[KEY].get("heldout")))


def _in_order(records: dict[str, dict]) -> list[tuple[str, dict]]:
    """The sets in the order they were made: set2 before set10."""
    return sorted(records.items(), key=lambda item: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", item[0])])


def _unseen_by_set(records: dict[str, dict]) -> str:
    """One sentence: each set's right advice and wrong advice by the tool of the revision it was labelled after,
    and all sets together."""
    said, total = [], [0, 0, 0]
    for name, record in _in_order(records):
        fresh = [scored for row in record["scripts"] if (scored := _unseen(row, record["before"]))]
        if fresh:
            right, labelled = sum(r["found"] for r in fresh), sum(r["labelled"] for r in fresh)
            wrong = sum(len(r["wrong"]) for r in fresh)
            said.append(f"{name} {right} of {labelled} ({right / labelled:.0%}), {wrong} wrong")
            total = [total[0] + right, total[1] + labelled, total[2] + wrong]
    if not said:
        return ""
    return (f" Unseen, set by set (right advice of labelled lines, wrong advice): {'; '.join(said)}; all sets together "
            f"{total[0]} of {total[1]} ({total[0] / total[1]:.0%}), {total[2]} wrong.")


def render_heldout_sets(measured) -> str:
    """Every held-out set kept in benchmarks/heldout/, and those this run measured (a list of records; older
    runs kept one dict or None), each with the words written about it around its table."""
    records = {path.stem: json.loads(path.read_text(encoding="utf-8")) for path in HELDOUT_KEPT.glob("*.json")}
    records |= {r["name"]: r for r in measured if "name" in r} if isinstance(measured, list) else {}
    if not records:
        return ("**Held-out published scripts**: none measured yet (`HELDOUT=NAME=folder make bench-migrate` "
                "scores a folder of labelled published scripts; their code is never committed).")
    parts = [HELDOUT_INTRO + _unseen_by_set(records)]
    for name, record in _in_order(records):
        notes = HELDOUT_KEPT / f"{name}.md"
        intro, _, after = (notes.read_text(encoding="utf-8") if notes.exists() else "").partition(TABLE_MARK)
        parts += [part.strip() for part in (intro, render_heldout(record), after) if part.strip()]
    return "\n\n".join(parts)


def _tally(scored: list[dict]) -> str:
    labelled, found = sum(r["labelled"] for r in scored), sum(r["found"] for r in scored)
    extra = sum(len(r["extra"]) for r in scored)
    either = sum(r.get("either", 0) for r in scored)
    return (f"{found} of {labelled} labelled lines found ({found / labelled:.0%}), "
            f"{sum(len(r['wrong']) for r in scored)} with wrong advice, "
            f"{extra} finding{'' if extra == 1 else 's'} on lines not labelled so"
            + (f", {either} both-outcomes finding{'' if either == 1 else 's'} (if a gradient, the trap; otherwise a "
               "rename: right for either label)" if either else ""))


def _unseen(row: dict, before: list[str]) -> dict | None:
    """A script's score by the tool of the revision it is fresh at: on code that tool's rules had not seen."""
    return row["before"][before.index(row["fresh_at"])] if row.get("fresh_at") in before else None


def render_heldout(heldout: dict | None) -> str:
    """One held-out set: a row per script, before and after, and what is still missed."""
    rows = heldout["scripts"]
    before = heldout["before"]

    def both(row: dict, key: str, fmt=str) -> str:
        return " → ".join(fmt(scored[key]) for scored in [*row["before"][:1], row])

    def unseen(row: dict) -> str:
        scored = _unseen(row, before)
        return f"{scored['found']} of {scored['labelled']}, {len(scored['wrong'])} wrong (`{row['fresh_at']}`)" \
            if scored else ""

    table = md_table(["script", "published as", "labelled", "found", "recall", "precision", "wrong advice",
                      "unseen"],
                     [[f"`{r['script']}`", r["source"], str(r["labelled"]), both(r, "found"),
                       both(r, "recall", lambda v: f"{v:.0%}"), both(r, "precision", lambda v: f"{v:.0%}"),
                       both(r, "wrong", lambda v: str(len(v))), unseen(r)] for r in rows], align="llrrrrrr")
    tallies = [(f"the tool of `{revision}`", [r["before"][i] for r in rows]) for i, revision in enumerate(before)]
    total = "; ".join(f"{who}: {_tally(scored)}" for who, scored in [*tallies, (f"the tool of `{heldout['commit']}`", rows)])
    if fresh := [scored for r in rows if (scored := _unseen(r, before))]:
        total += (f". The {len(fresh)} scripts labelled after a revision's rules were written, each scored by that "
                  f"revision's tool before any rule it led to (column unseen): {_tally(fresh)}")
    missed = [f"`{r['script']}` line {line} ({k})" for r in rows for line, k in r["missed"]]
    extra = [f"`{r['script']}` line {line} ({k})" for r in rows for line, k in r["extra"]]
    return (f"Held-out set `{heldout['name']}`, measured at `{heldout['commit']}`"
            + (f"; cells: the tool of `{before[0]}` → the tool of `{heldout['commit']}`" if before else "")
            + ":\n\n" + table + f"\n\nAll together: {total}. "
            + (f"Still missed: {', '.join(missed)}. " if missed else "Nothing missed. ")
            + (f"Findings on lines not labelled so: {', '.join(extra)}." if extra else ""))
