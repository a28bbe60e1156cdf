# Every target sets up its own environment (.venv) first. `make` alone lists the targets.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
LOCK := constraints.txt
NOTEBOOKS := $(sort $(wildcard book/*.ipynb))
JOBS ?= 2
BUILD_BOOK := $(BIN)/jupyter-book build . --nitpick --warningiserror --keep-going
# `make book` executes copies of the chapters here and builds the HTML from them.
BOOK_RUN := _build/run
# Which torch: auto (CPU-only on Linux without nvidia-smi, else the default), cpu or default.
TORCH_BUILD ?= auto
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# The browser tests' Chromium or Chrome: CHROMIUM=/path/to/it, or the first of these on PATH
# (tests/test_browser.py and scripts/lab_test.py look for the same names in the same order).
CHROMIUM_NAMES := chromium chromium-browser google-chrome google-chrome-stable chrome
CHROMIUM ?= $(firstword $(foreach name,$(CHROMIUM_NAMES),$(shell command -v $(name))))
NO_CHROMIUM := No Chromium or Chrome found (CHROMIUM is not set; none of $(CHROMIUM_NAMES) is on \
	PATH): the browser test will be skipped. Install one (Debian/Ubuntu: apt install chromium; \
	'make chromium' does it when run as root), or point CHROMIUM at any Chromium or Chrome, e.g. \
	make test CHROMIUM=/path/to/chrome
# The lock file is made by uv (installed into .venv by `make lock`, not a requirement).
UV_VERSION := 0.13.9
# torch's CUDA dependencies stay out of the lock: the torch build chosen above decides them.
CUDA_PACKAGES := cuda-bindings cuda-pathfinder cuda-toolkit nvidia-cublas nvidia-cuda-cupti \
	nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile \
	nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-nccl-cu13 \
	nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx triton

export PATH := $(CURDIR)/$(BIN):$(PATH)
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export CHROMIUM

.DEFAULT_GOAL := help
.PHONY: help venv book notebooks lab test browser-test lab-test bench bench-quick chromium lock \
	clean distclean

## help: list these targets (the default)
help:
	@echo "Attention from Scratch: make <target> (each creates .venv first if needed)"
	@awk '/^## [a-z-]+: / { sub(/^## /, ""); name = $$1; sub(/^[a-z-]+: /, ""); \
		printf "  make %-13s %s\n", substr(name, 1, length(name) - 1), $$0 }' $(MAKEFILE_LIST)
	@echo "Variables: TORCH_BUILD=auto|cpu|default, TORCH_CPU_INDEX=URL, CHROMIUM=path, JOBS=N,"
	@echo "  PYTHON=path/to/python3.11+, NOTEBOOKS='book/03_self_attention.ipynb ...'"

## book: execute copies of the chapters and build the HTML book into _build/html
# The committed notebooks are left as they are: copies under $(BOOK_RUN) are executed
# (NOTEBOOKS=... executes only those; the others keep their committed outputs) and built.
book: $(INSTALLED)
	rm -rf $(BOOK_RUN)
	mkdir -p $(BOOK_RUN)
	cp -R _config.yml _toc.yml book $(BOOK_RUN)/
	$(BIN)/python scripts/execute_notebooks.py --jobs $(JOBS) $(addprefix $(BOOK_RUN)/,$(NOTEBOOKS))
	$(BIN)/jupyter-book build $(BOOK_RUN) --path-output . --nitpick --warningiserror --keep-going
	@echo "Open _build/html/index.html"

## lab: JupyterLab on book/ with attnbook importable; open e.g. 03_self_attention.ipynb
lab: $(INSTALLED)
	$(BIN)/jupyter lab --notebook-dir=book

## test: every check: lint, format, book build, unit tests, strict nbval, browser test
# The book is built from the committed outputs (executing nothing); strict nbval then runs each
# chapter and compares its outputs with the committed ones, so they must be current (`make
# notebooks`). Screenshots of the built book go to _build/screenshots. Each of the $(JOBS)
# pytest workers, and the notebook kernel it starts, gets one thread. A failing run ends with
# the list of what failed (-rfEs: failures, errors, skips).
test: $(INSTALLED) chromium
	$(BIN)/ruff check src tests book scripts
	$(BIN)/ruff format --check src tests scripts book
	$(BUILD_BOOK)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(JOBS) --dist loadscope -rfEs tests book \
		--nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg

## notebooks: re-execute the chapters in place: fresh committed outputs (maintainers)
notebooks: $(INSTALLED)
	$(BIN)/python scripts/execute_notebooks.py --jobs $(JOBS) $(NOTEBOOKS)

## browser-test: only the browser test, on the book already built in _build/html
browser-test: $(INSTALLED) chromium
	$(BIN)/python -m pytest -p no:cacheprovider tests/test_browser.py -rfEs

## lab-test: the explorer and MyST rendering in JupyterLab (scripts/lab_test.py, ~1 min)
# A headless `jupyter lab` on a free port with a token; Chromium checks that an untrusted
# notebook shows the explorer's sentence, that a trusted one and one run in a kernel show the
# working explorer, and that jupyterlab-myst renders dropdowns, admonitions and {doc}
# references. Separate from `make test`: it starts a Jupyter server and a kernel, and it checks
# JupyterLab's handling of notebooks, not the book.
lab-test: $(INSTALLED) chromium
	$(BIN)/python scripts/lab_test.py

## bench: time and memory of the attention code, and the targets' verdicts (~2 min)
bench: $(INSTALLED)
	$(BIN)/python -m attnbook.bench

## bench-quick: a smoke run of the benchmark at small sizes (seconds)
bench-quick: $(INSTALLED)
	$(BIN)/python -m attnbook.bench --quick

## venv: create .venv with the pinned environment (redone when the pins change)
venv: $(INSTALLED)

# torch first, the build chosen by scripts/install_torch.py (TORCH_BUILD), then everything else
# with the lock file as constraints. pip byte-compiles what it installs, on purpose: where
# PYTHONDONTWRITEBYTECODE is set (as on our CI machines) nothing else writes .pyc files, and
# every test process and notebook kernel would compile torch's modules again (about 50 % more
# CPU for make test, measured).
$(INSTALLED): requirements.txt $(LOCK) pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "$(PYTHON) is older than Python 3.11, which attnbook requires (pyproject.toml)"; \
		  echo "Install Python 3.11 or newer, or run: make PYTHON=/path/to/python3.11 test"; exit 1; }
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
		echo "Could not create $(VENV). On Debian or Ubuntu: sudo apt install python3-venv"; exit 1; }
	$(BIN)/python scripts/install_torch.py --build $(TORCH_BUILD) --cpu-index $(TORCH_CPU_INDEX)
	@echo "Installing the $$(grep -c '^[a-z]' $(LOCK)) packages pinned in $(LOCK) (with torch," \
		"about 2.5 GB in $(VENV) with the CPU build, 6 GB with CUDA)"
	$(BIN)/python -m pip install --progress-bar on -c $(LOCK) -r requirements.txt
	touch $@

## lock: regenerate constraints.txt (every package's version) from requirements.txt
lock:
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	$(BIN)/uv pip compile requirements.txt --quiet --universal --python-version 3.11 \
		--no-emit-package attnbook $(addprefix --no-emit-package ,$(CUDA_PACKAGES)) \
		--custom-compile-command "make lock" --output-file $(LOCK)
	@! grep -E '^(nvidia-|triton|cuda-)' $(LOCK) || \
		{ echo "CUDA packages in $(LOCK): add them to CUDA_PACKAGES in the Makefile"; exit 1; }

## chromium: find Chromium or Chrome for the browser tests; install Debian's when root
# Where CI is set (true or 1), a missing browser fails the run instead: CI must not pass
# without the browser test.
chromium:
	@if [ -n "$(CHROMIUM)" ] && [ -x "$(CHROMIUM)" ]; then :; \
	elif [ -n "$(CHROMIUM)" ]; then echo "CHROMIUM=$(CHROMIUM) is not an executable file"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing Debian's chromium for the browser test"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq chromium >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || \
		echo "Could not install chromium: the browser test will be skipped"; \
	else \
		echo "$(NO_CHROMIUM)"; \
	fi
	@case "$${CI:-}" in true|TRUE|True|1) [ -n "$(CHROMIUM)" ] && [ -x "$(CHROMIUM)" ] || \
		{ echo "CI is set but there is no browser: set CHROMIUM"; exit 1; };; esac

## clean: remove what the build and the tests write (_build, caches); keeps .venv
clean:
	rm -rf _build .pytest_cache .ruff_cache .hypothesis

## distclean: clean, and remove .venv too (2.5 GB or more; the next target rebuilds it)
distclean: clean
	rm -rf $(VENV)
