# Included by each function's Makefile (after SHARED is set). /var/task is read-only in Lambda:
# a function without bytecode compiles its handler and its bundled dependencies on every cold
# start. layer/compile_bytecode.py writes checked-hash bytecode for each runtime the template
# allows (its Runtime parameter) whose interpreter is on the building machine.
PYTHON ?= python3
BYTECODE_VERSIONS ?= 3.11 3.12 3.13 3.14
COMPILE_BYTECODE = $(PYTHON) "$(SHARED)/../../layer/compile_bytecode.py" "$(ARTIFACTS_DIR)" \
	$(BYTECODE_VERSIONS)
