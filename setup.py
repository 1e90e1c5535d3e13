"""Packaging (the rest is in pyproject.toml): the wheel also carries the files the notebooks launch
or read at run time, copied from notebooks/ into helpers/course_files/ (see helpers/files.py)."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

COURSE_FILES = ("scripts/*.py", "transcripts/*.txt")  # relative to notebooks/


class BuildWithCourseFiles(build_py):
    def run(self):
        super().run()
        found = [p for pattern in COURSE_FILES for p in sorted(Path("notebooks").glob(pattern))]
        if not found:
            raise SystemExit("setup.py: no notebooks/scripts or notebooks/transcripts to package; "
                             "build the wheel from a clone of the course")
        for path in found:
            target = Path(self.build_lib) / "helpers" / "course_files" / path.relative_to("notebooks")
            self.mkpath(str(target.parent))
            self.copy_file(str(path), str(target))


setup(cmdclass={"build_py": BuildWithCourseFiles})
