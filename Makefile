# Two commands: `make lab` opens the course, `make test` proves it. Both set up .venv first.
# The Python the venv is made with: PYTHON=... if given, else the first 3.12+ that tools/find_python.sh
# finds (python3.12, python3.13, python3 on PATH, then pyenv's versions).
PYTHON ?=
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Three xdist workers on a 2-core machine: a third fills the time the others spend waiting on real
# processes (start-ups, barriers, stall limits). Measured here: 696 s with 2, 556 s with 3.
PYTEST_WORKERS ?= 3

.PHONY: lab test test-browser site linkcheck hub bench-hub bench-verdicts bench-floor bench-migrate python-versions notebook bench bench-tests bench-compare doctor solutions notebooks venv clean help

help:
	@echo "make lab            set up .venv and open JupyterLab on the course"
	@echo "make test           set up .venv and run every test (unit, nbval, solved notebooks, browser)"
	@echo "make notebook NB=02 run one notebook's nbval check and solved run"
	@echo "make test-browser   only the real-browser test"
	@echo "make python-versions  the pins and nbval on notebooks 00 and 08 with Python 3.12 and 3.13 (pyenv; minutes)"
	@echo "make site           build the course as a static site in build/site/ (its own pins: requirements-site.txt)"
	@echo "make linkcheck      the site's external links, each with its pages (to open with a network)"
	@echo "make doctor         preflight check for a workshop laptop"
	@echo "make hub            as root: JupyterHub on 127.0.0.1:8000 for LEARNERS=\"learner1 learner2 learner3\""
	@echo "make bench-hub      as root: K = 1, 2, 4 learners Run All 02 and 08 through the hub; BENCHMARKS.md"
	@echo "make solutions      write solved, executed copies into solutions/"
	@echo "make notebooks      rebuild notebooks/*.ipynb from notebooks/src, execute them, and the README course table"
	@echo "make bench          measure the course (all but the test suite; < 10 min), keep the raw results"
	@echo "                    in benchmarks/results/, write BENCHMARKS.md"
	@echo "make bench-tests    measure the test suite (as long as make test) and add it to BENCHMARKS.md"
	@echo "make bench-verdicts how long a hanging answer waits for its verdict (warm and cold hosts); BENCHMARKS.md"
	@echo "make bench-floor    a host's start (import jax, one jitted op) beside the course's on jax 0.10.2"
	@echo "make bench-migrate  what python -m helpers.migrate finds in the labelled corpus; BENCHMARKS.md"
	@echo "make bench-compare A B   ratios between two runs (files or stamps in benchmarks/results/)"

venv: $(STAMP)

# uv (pinned in requirements-bootstrap.txt, installed by the venv's pip) installs every other pin, and
# compiles their bytecode as pip does (a first import then reads it instead of compiling).
# uv does not read pip's configuration: where it cannot install (a package index set only for pip,
# say), pip installs the same pins, slower.
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check
install = @echo "uv pip install $(1)"; $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python $(1) \
	|| { echo "uv could not install $(1): pip will (slower)"; $(PIP) $(1); }

$(STAMP): requirements.txt requirements-lock.txt requirements-bootstrap.txt pyproject.toml
	@python="$(PYTHON)"; [ -n "$$python" ] || python=$$(tools/find_python.sh) || exit 2; \
	"$$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else "Python 3.12+ is needed (jax 0.11 dropped 3.11); $$python is " + sys.version.split()[0] + ": leave PYTHON out to find one, or give another")' || exit 2; \
	if [ -x $(BIN)/python ] && ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then \
		echo "$(VENV) was made with a Python older than 3.12: making it anew with $$python"; rm -rf $(VENV); fi; \
	test -x $(BIN)/python || { echo "making $(VENV) with $$python"; "$$python" -m venv $(VENV); }
	@$(PIP) -r requirements-bootstrap.txt
	$(call install,-r requirements.txt -c requirements-lock.txt)
	$(call install,--no-deps -e .)
	@touch $(STAMP)

# The site's tooling (Sphinx, myst-nb) is installed by `make site` and `make test`, never by `make lab`.
SITE_STAMP := $(VENV)/.site-installed

$(SITE_STAMP): $(STAMP) requirements-site.txt
	$(call install,-r requirements-site.txt -c requirements-lock.txt)
	@touch $(SITE_STAMP)

# The workshop hub's tooling (JupyterHub, its npm proxy): `make hub`, `make bench-hub`, `make test`.
HUB_STAMP := $(VENV)/.hub-installed
HUB_PROXY := hub/node_modules/.bin/configurable-http-proxy
LEARNERS ?= learner1 learner2 learner3
HUB_PORT ?= 8000

$(HUB_STAMP): $(STAMP) requirements-hub.txt
	$(call install,-r requirements-hub.txt -c requirements-lock.txt)
	@touch $(HUB_STAMP)

$(HUB_PROXY): hub/package.json hub/package-lock.json
	@command -v npm >/dev/null || { echo "the hub's proxy comes from the npm registry: install Node.js and npm (apt-get install npm)"; exit 2; }
	npm ci --prefix hub --no-audit --no-fund --loglevel=error
	@touch $(HUB_PROXY)

hub: $(HUB_STAMP) $(HUB_PROXY)
	$(BIN)/python tools/hub.py serve --learners "$(LEARNERS)" --port $(HUB_PORT)

bench-hub: $(HUB_STAMP) $(HUB_PROXY)
	$(BIN)/python -m benchmarks.run --only hub

bench-verdicts: $(STAMP)
	$(BIN)/python -m benchmarks.run --only verdicts

bench-migrate: $(STAMP)
	$(BIN)/python -m benchmarks.run --only migrate

# The floor beside the course's environments at its last commit on jax 0.10.2 (Python 3.11 and this
# venv's; built once in build/floor/), or beside others: make bench-floor FLOOR_AGAINST="PYTHON ..."
bench-floor: $(STAMP)
	@against="$(FLOOR_AGAINST)"; [ -n "$$against" ] || against=$$($(BIN)/python -m benchmarks.floor_envs) || exit 1; \
	$(BIN)/python -m benchmarks.run --only floor --floor-against $$against

ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: $(STAMP)
	$(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=. $(ROOT_FLAG) \
		--ServerApp.default_url=/lab/tree/notebooks/00_fake_devices.ipynb $(LAB_ARGS)

test: $(STAMP) $(SITE_STAMP) $(HUB_STAMP) $(HUB_PROXY)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder -rs --durations=12

notebook: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make notebook NB=02"; exit 2; }
	$(BIN)/python -m pytest -p no:xdist notebooks/$(NB)_*.ipynb tests/test_solved_notebooks.py -k "$(NB)_"

test-browser: $(STAMP)
	@$(BIN)/python -c 'import sys; sys.path.insert(0, "tests"); import browser_support as b; sys.exit(0 if b.find_chromium() else "make test-browser: " + b.INSTALL_HINT)'
	$(BIN)/python -m pytest -p no:xdist -rs -m browser tests/test_browser.py

site: $(SITE_STAMP)
	$(BIN)/python site/build.py

# Every external link of the built site, with its pages, for someone with a network to open.
linkcheck: site
	$(BIN)/python site/links.py --external build/site

# Not in `make test`: two installs of the pins and two nbval runs take minutes.
PYTHON_VERSIONS ?= 3.12 3.13
python-versions:
	tools/python_versions.sh $(PYTHON_VERSIONS)

doctor: $(STAMP)
	$(BIN)/python -m helpers.doctor

solutions: $(STAMP)
	$(BIN)/python tools/make_solutions.py

notebooks: $(STAMP)
	$(BIN)/python tools/build_notebooks.py $(NB)
	$(BIN)/python tools/course_table.py

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

bench-tests: $(STAMP)
	$(BIN)/python -m benchmarks.run --only tests

# `make bench-compare A B`: the two words after the target are runs, not targets to build.
ifeq (bench-compare,$(firstword $(MAKECMDGOALS)))
  COMPARE_RUNS := $(wordlist 2,$(words $(MAKECMDGOALS)),$(MAKECMDGOALS))
  ifneq (,$(COMPARE_RUNS))
    $(eval .PHONY: $(sort $(COMPARE_RUNS)))
    $(eval $(sort $(COMPARE_RUNS)):;@:)
  endif
endif

bench-compare: $(STAMP)
	$(BIN)/python -m benchmarks.compare $(or $(COMPARE_RUNS),$(A) $(B))

clean:
	rm -rf $(VENV) solutions .pytest_cache .jax-cache build/site build/site-src build/site-doctrees build/site-cache build/python-* hub/node_modules
