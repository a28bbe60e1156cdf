# `make book` and `make test` each do everything on a fresh machine, environment included.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard book/*.ipynb))
JOBS ?= 2
BUILD_BOOK := $(BIN)/jupyter-book build . --nitpick --warningiserror --keep-going

export PATH := $(CURDIR)/$(BIN):$(PATH)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: book test notebooks lab venv clean

## venv: create .venv and install requirements.txt (redone when it or pyproject.toml changes)
venv: $(INSTALLED)

$(INSTALLED): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

## notebooks: re-execute every chapter in place so the committed outputs are fresh
notebooks: $(INSTALLED)
	$(BIN)/python scripts/execute_notebooks.py $(NOTEBOOKS)

## book: execute the notebooks, then build the HTML book into _build/html
book: notebooks
	$(BUILD_BOOK)
	@echo "Open _build/html/index.html"

## test: lint, build the book from the committed outputs, run the unit tests and strict nbval
test: $(INSTALLED)
	$(BIN)/ruff check src tests book scripts
	$(BUILD_BOOK)
	$(BIN)/python -m pytest -n $(JOBS) --dist loadscope tests book \
		--nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg

## lab: JupyterLab on book/ with attnbook importable
lab: $(INSTALLED)
	$(BIN)/jupyter lab --notebook-dir=book

clean:
	rm -rf _build .pytest_cache .ruff_cache .hypothesis
