# `make book` and `make test` each do everything on a fresh machine, environment included.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard book/*.ipynb))
JOBS ?= 2
CHROMIUM ?= /usr/bin/chromium
BUILD_BOOK := $(BIN)/jupyter-book build . --nitpick --warningiserror --keep-going

export PATH := $(CURDIR)/$(BIN):$(PATH)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: book test notebooks lab venv clean chromium browser-test bench lab-test

## venv: create .venv and install requirements.txt (redone when it or pyproject.toml changes)
venv: $(INSTALLED)

# pip byte-compiles what it installs, on purpose: where PYTHONDONTWRITEBYTECODE is set (as on
# our CI machines) nothing else writes .pyc files, and every test process and notebook kernel
# would compile torch's modules again (about 50 % more CPU for make test, measured).
$(INSTALLED): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "$(PYTHON) is older than Python 3.11, which attnbook requires (pyproject.toml)"; \
		  echo "Install Python 3.11 or newer, or run: make PYTHON=/path/to/python3.11 test"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

## notebooks: re-execute every chapter in place so the committed outputs are fresh
notebooks: $(INSTALLED)
	$(BIN)/python scripts/execute_notebooks.py --jobs $(JOBS) $(NOTEBOOKS)

## book: execute the notebooks, then build the HTML book into _build/html
book: notebooks
	$(BUILD_BOOK)
	@echo "Open _build/html/index.html"

## chromium: install Debian's Chromium for the browser test when it is missing and we are root;
## otherwise say why tests/test_browser.py will be skipped. Where CI is set (true or 1), a
## missing browser fails the run instead: CI must not pass without the browser test.
chromium:
	@if [ -x "$(CHROMIUM)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing Debian's chromium for the browser test"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq chromium >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || \
		echo "Could not install chromium: the browser test will be skipped"; \
	else \
		echo "No $(CHROMIUM) and not root: the browser test will be skipped"; \
	fi
	@case "$${CI:-}" in true|TRUE|True|1) [ -x "$(CHROMIUM)" ] || \
		{ echo "CI is set but there is no browser at $(CHROMIUM): set CHROMIUM"; exit 1; };; esac

## test: lint and format check (the book's code cells at 88 columns: book/ruff.toml), build the
## book from the committed outputs, run the unit tests, strict nbval and the browser test of the
## built book (screenshots in _build/screenshots).
## Each of the $(JOBS) pytest workers, and the notebook kernel it starts, gets one thread:
## together they use the cores without oversubscribing them.
test: $(INSTALLED) chromium
	$(BIN)/ruff check src tests book scripts
	$(BIN)/ruff format --check src tests scripts book
	$(BUILD_BOOK)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(JOBS) --dist loadscope -rs tests book \
		--nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg

## browser-test: only the browser test, on the book already built in _build/html
browser-test: $(INSTALLED) chromium
	$(BIN)/python -m pytest -p no:cacheprovider tests/test_browser.py -rs

## lab-test: the attention explorer inside JupyterLab 4 (scripts/lab_test.py): a headless
## `jupyter lab` on a free port with a token, Chromium checks that an untrusted notebook shows the
## explorer's sentence and that a trusted one, and one run in a kernel, show the working explorer.
## Separate from `make test`: it starts a Jupyter server and a kernel (about 40 s), and it checks
## JupyterLab's handling of outputs, not the book; run it after changing the explorer.
lab-test: $(INSTALLED) chromium
	$(BIN)/python scripts/lab_test.py

## bench: time and memory of the attention code, with the targets' verdicts (2-3 min on 2 cores)
bench: $(INSTALLED)
	$(BIN)/python -m attnbook.bench

## lab: JupyterLab on book/ with attnbook importable
lab: $(INSTALLED)
	$(BIN)/jupyter lab --notebook-dir=book

clean:
	rm -rf _build .pytest_cache .ruff_cache .hypothesis
