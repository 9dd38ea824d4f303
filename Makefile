# Developer entry points for cl-lifetime: make setup | setup-all | demo | examples | bench | test | test-all | stress | soak | leakcheck | trace | trace-picture | package-check | lint | clean.
CARGO ?= cargo
# Fall back to a rustup install whose bin directory is not on PATH yet.
export PATH := $(PATH):$(HOME)/.cargo/bin
# Where cargo builds, and where the targets below write: cargo's own CARGO_TARGET_DIR when
# it is set, else target/ of the checkout.
CARGO_TARGET_DIR ?= target

.PHONY: setup setup-all demo examples test test-all lint clean bench cl-calls emulate package-check soak stress leakcheck trace trace-picture

# What `make demo` and `make test` need: the OpenCL loader, PoCL when no platform is
# registered, a C compiler (scripts/setup.sh says what it installs).
setup:
	bash scripts/setup.sh

# And what `make test-all`, `make leakcheck` and CI use: Oclgrind, Mesa's rusticl, CLBlast,
# valgrind, clinfo, and Intel's OpenCL CPU runtime into .opencl/intel (about 800 MB).
setup-all:
	bash scripts/setup.sh --all

demo: setup
	$(CARGO) run --release --example tour

# Five problems, each shown with raw opencl3 and then with cl-lifetime, measured
# (examples/release_sync.rs, memory_held.rs, free_after_async.rs, reallocation.rs; a few seconds each;
# svm_linked_list.rs: the clSVMFree trap, a kernel walking a freed SVM linked list, in a child process).
examples: setup
	$(CARGO) run --release --example release_sync
	$(CARGO) run --release --example memory_held
	$(CARGO) run --release --example free_after_async
	$(CARGO) run --release --example reallocation
	$(CARGO) run --release --example svm_linked_list

# The comparative benchmark (bench/examples/compare.rs, an example of the workspace's
# unpublished member bench/): $(CARGO_TARGET_DIR)/bench/report.{json,md,svg}.
# QUICK=1 runs the short version (under 2 minutes on PoCL).
bench: setup
	$(CARGO) run --release --example compare -- $(if $(QUICK),--quick,)
	$(CARGO) run --release --example async_wake -- $(if $(QUICK),--quick,)

# The OpenCL call counter (scripts/cl-calls.c): run a program with
# OPENCL_DYLIB_PATH=$(CARGO_TARGET_DIR)/libcl-calls.so (an absolute path) to get its OpenCL calls and their host time.
cl-calls: $(CARGO_TARGET_DIR)/libcl-calls.so

# The crate as packaged (cargo package), unpacked, and the README's example built and run
# from it in a new crate (scripts/package-check.sh).
package-check: setup
	bash scripts/package-check.sh

# The driver emulator (scripts/cl-emulate.c): LD_LIBRARY_PATH=$(CARGO_TARGET_DIR)/emulate
# CL_EMULATE=mesa|amd|intel-gpu|intel-cpu|failed-profiling|unchecked-overlap makes the OpenCL under it act as
# that driver does (make test-all runs the suite under each).
emulate: $(CARGO_TARGET_DIR)/emulate/libOpenCL.so.1

REAL_LOADER ?= $(shell (ldconfig -p 2>/dev/null || /sbin/ldconfig -p) | awk '/libOpenCL\.so\.1 / {print $$NF; exit}')
# Its entry points carry the loader's symbol versions (read with objdump where it is there),
# as programs linked against the loader ask for them.
$(CARGO_TARGET_DIR)/emulate/libOpenCL.so.1: scripts/cl-emulate.c
	mkdir -p $(CARGO_TARGET_DIR)/emulate
	(objdump -T "$(REAL_LOADER)" 2>/dev/null || true) | awk '$$NF ~ /^cl/ && $$(NF-1) ~ /^OPENCL/ \
	  { v[$$(NF-1)] = v[$$(NF-1)] " " $$NF ";" } END { for (k in v) print k " {" v[k] " };"; \
	  print "CL_EMULATE { global: *; };" }' > $(CARGO_TARGET_DIR)/emulate/versions.map
	$(CC) -O2 -Wall -Wextra -shared -fPIC -o $@ $< -ldl -lpthread -DREAL_LOADER='"$(REAL_LOADER)"' \
	  -Wl,--version-script=$(CARGO_TARGET_DIR)/emulate/versions.map

$(CARGO_TARGET_DIR)/libcl-calls.so: scripts/cl-calls.c
	mkdir -p $(CARGO_TARGET_DIR)
	$(CC) -O2 -Wall -shared -fPIC -o $@ $< -ldl -Wl,--no-as-needed -l:libOpenCL.so.1

# Two CPU devices of one platform for the cross-device tests (PoCL 3 and 5 accept this).
test: export POCL_DEVICES ?= pthread pthread
test: setup emulate
	CARGO=$(CARGO) bash scripts/test.sh

# 300,000 cancelled commands (each waits on a gate that is then failed): the process's
# memory must stay flat; prints the RSS after each tenth.
soak: setup
	CL_LIFETIME_SOAK=300000 $(CARGO) test --release --test integration \
		failures::cancelled_commands_keep_the_process_memory_flat -- --nocapture

# The stress test at full size: 100,000 random operations from 4 threads on 3 queues,
# with injected failures (tests/integration/stress.rs); `make test` runs 20,000. Then the
# async tests at full size: 100,000 tasks awaiting commands behind closed gates (1,000 in
# `make test`), and 20,000 random async tasks against their model (1,200).
stress: export POCL_DEVICES ?= pthread pthread
stress: setup
	CL_LIFETIME_STRESS_OPS=$(or $(OPS),100000) $(CARGO) test --release --test integration \
		stress:: -- --nocapture
	CL_LIFETIME_GATED_AWAITS=100000 CL_LIFETIME_ASYNC_TASKS=20000 $(CARGO) test --release \
		--test integration -- --exact asynchronous::awaits_behind_closed_gates_never_starve_an_ungated_one \
		asynchronous::random_async_programs_match_their_model --nocapture
	CL_LIFETIME_MODEL=full $(CARGO) test --release --lib core::waiter::model -- --nocapture

# A small two-queue pipeline with the lifetime trace on (examples/trace.rs): writes
# $(CARGO_TARGET_DIR)/trace/pipeline.json, for https://ui.perfetto.dev or chrome://tracing.
trace: setup
	$(CARGO) run --release --example trace -- $(CARGO_TARGET_DIR)/trace/pipeline.json

# That trace drawn by src/trace/view.html in headless Chromium: docs/trace.png
# (scripts/trace-picture.sh; installs Debian's chromium when missing).
trace-picture: trace
	bash scripts/trace-picture.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	RUSTDOCFLAGS=-Dwarnings $(CARGO) doc --no-deps
	bash scripts/doc-links.sh
	python3 scripts/layers.py

clean:
	$(CARGO) clean

# The whole suite on every OpenCL implementation installed: PoCL with one device and with
# two, Mesa rusticl (llvmpipe), Oclgrind with its checks on, Intel's CPU runtime (which
# `make setup-all` installs into .opencl/intel), and PoCL with CL_LIFETIME_DRIVER=unknown
# (scripts/test-all.sh);
# ONLY="pocl-1 rusticl" picks some. Logs and the summary go to $(CARGO_TARGET_DIR)/test-all/.
test-all: setup-all
	bash scripts/test-all.sh

# The tour, the four examples, the traced pipeline and the stress test under valgrind's memcheck (scripts/leakcheck.sh):
# any memory error or leak fails, beyond the driver noise listed in scripts/valgrind.supp.
# Logs go to $(CARGO_TARGET_DIR)/leakcheck/; ONLY="tour stress" picks some, OPS sizes the stress test.
leakcheck: setup-all
	bash scripts/leakcheck.sh
