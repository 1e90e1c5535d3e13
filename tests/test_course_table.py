"""Each notebook's title, "you will learn" line and budget live once, in its front matter;
the README's course table is generated from them and must not be stale."""
import pytest

from tools import course_table as ct

SOURCES = ct.course_sources()
HEADER = "---\njupytext:\n  text_representation:\n    format_name: myst\n"


def test_there_are_notebook_sources():
    assert SOURCES, "no notebooks/src/NN_*.md found"


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_every_notebook_has_its_course_fields_and_its_heading_is_its_title(path):
    info = ct.read_info(path)  # raises FrontMatterError naming the missing field
    assert info.run_all_budget_s > 0
    headings = [line for line in path.read_text(encoding="utf-8").splitlines()
                if line.startswith("# ")]
    assert headings and headings[0] == info.heading, (
        f"{path.name}: the first heading must be {info.heading!r} (the front matter's title), "
        f"found {headings[:1]}")


def test_the_readme_course_table_is_generated_from_the_front_matter():
    readme = ct.README.read_text(encoding="utf-8")
    assert ct.with_table(readme, ct.course_table(ct.read_all())) == readme, (
        "README.md's course table is stale: run `python tools/course_table.py`")


def _source(tmp_path, name, course: str):
    path = tmp_path / name
    path.write_text(HEADER + course + "---\n\n# title\n", encoding="utf-8")
    return path


def test_a_source_without_the_fields_fails_clearly(tmp_path):
    _source(tmp_path, "10_flax.md", "")
    _source(tmp_path, "11_data.md", "course:\n  title: Data\n  run_all_budget_s: fast\n")
    with pytest.raises(ct.FrontMatterError) as err:
        ct.read_all(tmp_path)
    text = str(err.value)
    assert "10_flax.md: its front matter has no 'course' block" in text
    assert "11_data.md" in text and "'you_will_learn' is missing" in text
    assert "'run_all_budget_s' must be a positive number of seconds, got 'fast'" in text


def test_a_source_without_front_matter_or_with_broken_yaml_fails_clearly(tmp_path):
    (tmp_path / "12_hosts.md").write_text("# 12 · no front matter\n", encoding="utf-8")
    with pytest.raises(ct.FrontMatterError, match="12_hosts.md: no front matter"):
        ct.read_all(tmp_path)
    (tmp_path / "12_hosts.md").write_text("---\ncourse: [\n---\n", encoding="utf-8")
    with pytest.raises(ct.FrontMatterError, match="12_hosts.md: its front matter is not valid YAML"):
        ct.read_all(tmp_path)


def test_any_new_notebook_joins_the_table_and_the_budgets(tmp_path):
    _source(tmp_path, "13_puzzles.md", "course:\n  title: 'Collective puzzles'\n"
            "  you_will_learn: 'all-reduce from its parts'\n  run_all_budget_s: 30\n")
    infos = ct.read_all(tmp_path)
    assert ct.budgets(tmp_path) == {"13_puzzles": 30.0}
    table = ct.course_table(infos)
    assert ("| 13 | [Collective puzzles](notebooks/13_puzzles.ipynb) | all-reduce from its parts "
            "| 30 s |") in table
    assert ct.with_table(f"a\n{ct.TABLE_START}\nold\n{ct.TABLE_END}\nb", table) == f"a\n{table}\nb"
    with pytest.raises(ct.FrontMatterError, match="no <!-- course-table:start -->"):
        ct.with_table("a README without markers", table)
