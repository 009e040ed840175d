# Two commands on a fresh machine:
#   make demo   - creates .venv-demo, installs opgate, and runs it for real on this machine (CPU-only works)
#   make test   - creates .venv-test, installs opgate with its test extras (and the Debian packages the browser
#                 and PostgreSQL tests use, when missing), and runs the test suite
# TORCH_SPEC pins the torch build pip takes; on CPU-only CI machines a local CPU wheel satisfies torch==2.13.0.

PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
REPORT_DIR ?= opgate-report
# Two pytest processes, each taking whole test files (module fixtures run once): on the 2-core CI machine the suite
# took 655-694 s from fresh clones against 832 s in one process (docs/benchmarks.md). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
# --durations: the slowest tests at the end of every run (CI's log says where #27's 11 minutes go).
PYTEST_ARGS ?= $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) --durations=25

DEMO_VENV := .venv-demo
TEST_VENV := .venv-test

.PHONY: demo test clean

$(DEMO_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/pip install -q --upgrade pip
	$(DEMO_VENV)/bin/pip install -q "$(TORCH_SPEC)"
	$(DEMO_VENV)/bin/pip install -q -e ".[verify]"
	touch $@

$(TEST_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(TEST_VENV)
	$(TEST_VENV)/bin/pip install -q --upgrade pip
	$(TEST_VENV)/bin/pip install -q "$(TORCH_SPEC)"
	$(TEST_VENV)/bin/pip install -q -e ".[verify,test]"
	touch $@

demo: $(DEMO_VENV)/.installed
	bash scripts/demo.sh $(DEMO_VENV) $(REPORT_DIR)

test: $(TEST_VENV)/.installed
	bash scripts/install_test_system_packages.sh
	$(TEST_VENV)/bin/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(DEMO_VENV) $(TEST_VENV) $(REPORT_DIR)
