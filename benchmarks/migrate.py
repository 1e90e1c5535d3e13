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
"""
from __future__ import annotations

from pathlib import Path

from benchmarks.measure import ROOT, log
from benchmarks.tables import md_table
from helpers.migrate import Finding, migrate

KEY = "migrate"
TITLE = "The migration assistant on pmap-era scripts in published styles"
CORPUS = ROOT / "tests" / "migrate_corpus"


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


def kind(finding: Finding) -> str:
    """A finding's rule, with pmap-collective told apart: the gradient trap or a rename."""
    if finding.rule != "pmap-collective":
        return finding.rule
    return "pmap-collective:" + ("trap" if "N times too large" in finding.does else "rename")


def score(script: Path) -> dict:
    """Recall, precision and wrong advice of the tool on one script, and its findings on the port."""
    want = labels(script)
    got = {(f.line, kind(f)) for f in migrate(script, show=False)}
    labelled_lines = {line for line, _ in want}
    wrong = sorted(pair for pair in got - want if pair[0] in labelled_lines)
    ported = script.with_name(script.stem + "_ported.py")
    return {"script": script.name, "labelled": len(want), "found": len(got & want),
            "recall": len(got & want) / len(want), "precision": len(got & want) / len(got) if got else 1.0,
            "missed": sorted(want - got), "extra": sorted(got - want), "wrong": wrong,
            "ported_findings": [str(f) for f in migrate(ported, show=False)]}


def measure(results, opts) -> None:
    log(f"migrate: {len(scripts())} labelled scripts of {CORPUS.relative_to(ROOT)}")
    results.sections[KEY] = {"scripts": [score(s) for s in scripts()]}


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
            "not seen are the fairer test.")
