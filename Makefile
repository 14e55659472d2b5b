# make run: install, then serve the demo model at http://127.0.0.1:8000 (gateway, 1 prefill + 1 decode worker)
# make test: install, then run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8000
DEMO_MODEL ?= models/tandem-demo-target
FALLBACK_MODEL := .cache/tiny-llama

.PHONY: run test install clean

install: $(STAMP)

$(STAMP): pyproject.toml scripts/system-deps.sh
	./scripts/system-deps.sh
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $@

run: $(STAMP)
	@model=$(DEMO_MODEL); \
	if [ ! -f $$model/config.json ]; then \
	  model=$(FALLBACK_MODEL); \
	  [ -f $$model/config.json ] || $(PY) -m tandem model make-test $$model --arch LlamaForCausalLM; \
	fi; \
	$(PY) -m compileall -q tandem; \
	$(PY) -m tandem up --model $$model --prefill 1 --decode 1 --port $(PORT)

# tandem is installed editable, so pip compiles none of its modules: without bytecode every
# process (each worker, each test server) compiles them again, and with PYTHONDONTWRITEBYTECODE
# set nothing is ever cached (~80 ms of each start)
test: $(STAMP)
	$(PY) -m compileall -q tandem
	$(PY) -m pytest -q -rs -p no:cacheprovider

clean:
	rm -rf $(VENV) .cache
