# xdproce — build, test and demo. Every target installs what it needs on a fresh Debian machine.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOTESTFLAGS ?= -count=1 -timeout 30m
SUDO        := $(if $(filter 0,$(shell id -u)),,sudo)
# Packages holding BPF C sources whose bpf2go output is committed.
BPF_PKGS    := ./bpf/... ./impair/...

.PHONY: all build deps deps-bpf deps-provider deps-stock deps-abi provider install generate check-generate generate-abi check-abi lint test race unit bench fuzz demo interop interop-smoke clean

all: build

deps:
	@command -v ip >/dev/null || ($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq iproute2)
	$(GO) mod download

# clang/llvm/libbpf headers are needed only to regenerate the committed BPF objects.
deps-bpf:
	@command -v clang >/dev/null && command -v llvm-strip >/dev/null && test -f /usr/include/bpf/bpf_helpers.h || \
		($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq clang llvm libbpf-dev linux-libc-dev)

build: deps provider
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) build -o bin/xdproce ./cmd/xdproce

# The drop-in libraries stock RDMA applications load (provider/): C, built with Debian's
# compiler against Debian's rdma-core headers, so every structure is laid out as rdma-core's.
# `xdproce run` finds them in bin/lib beside bin/xdproce, or in $(PREFIX)/lib/xdproce.
CC          ?= cc
PROVIDER_CFLAGS ?= -O2 -g -Wall -Wextra -Werror -fPIC -fvisibility=hidden -std=gnu11
LIBDIR      := bin/lib
PREFIX      ?= /usr/local
# provider/common: what both libraries compile in (the control messages' codec).
COMMON_SRCS := $(wildcard provider/common/*.c)
COMMON_HDRS := $(wildcard provider/common/*.h)
VERBS_SRCS  := $(wildcard provider/verbs/*.c) $(COMMON_SRCS)
VERBS_HDRS  := $(wildcard provider/verbs/*.h) $(COMMON_HDRS)
RDMACM_SRCS := $(wildcard provider/rdmacm/*.c) $(COMMON_SRCS)
RDMACM_HDRS := $(wildcard provider/rdmacm/*.h) $(COMMON_HDRS)

# Debian's stock RDMA programs, which test/e2e and the interop cells run on xdproce's libibverbs
# (socat and iperf: ordinary TCP programs, run over rsockets under librspreload).
deps-stock:
	@command -v ib_write_bw >/dev/null && command -v ibv_rc_pingpong >/dev/null && command -v rping >/dev/null && \
		command -v socat >/dev/null && command -v iperf >/dev/null || \
		($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq perftest ibverbs-utils rdmacm-utils qperf socat iperf)

# The Debian packages that link rdma-core's libraries, whose every ELF test/abi loads on xdproce's
# libraries: rdma-core's own (libraries, providers, pyverbs), UCX, libfabric and Open MPI.
deps-abi: deps-stock deps-provider
	@command -v ucx_info >/dev/null && command -v fi_info >/dev/null && command -v mpirun >/dev/null && \
		test -f /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h && \
		test -d /usr/lib/python3/dist-packages/pyverbs && test -f /usr/lib/x86_64-linux-gnu/libmlx5.so.1 || \
		($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq ibverbs-providers python3-pyverbs \
			ucx-utils libucx0 libfabric1 libfabric-bin openmpi-bin libopenmpi-dev)

deps-provider:
	@command -v $(CC) >/dev/null && test -f /usr/include/infiniband/verbs.h && test -f /usr/include/rdma/rdma_cma.h || \
		($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq gcc libibverbs-dev librdmacm-dev)

provider: deps-provider $(LIBDIR)/libibverbs.so.1 $(LIBDIR)/librdmacm.so.1 $(LIBDIR)/libmlx5.so.1 $(LIBDIR)/libefa.so.1

$(LIBDIR)/libibverbs.so.1: $(VERBS_SRCS) $(VERBS_HDRS) provider/verbs/libibverbs.map
	@mkdir -p $(LIBDIR)
	$(CC) $(PROVIDER_CFLAGS) -shared -Wl,-soname,libibverbs.so.1 -Wl,--version-script=provider/verbs/libibverbs.map \
		-Wl,-z,defs -o $@ $(VERBS_SRCS) -lpthread

# librdmacm.so.1 is a client of the daemon's connection manager on the contexts of xdproce's
# libibverbs.so.1, whose private node (XDPROCE_PRIVATE_1) it links against.
$(LIBDIR)/librdmacm.so.1: $(RDMACM_SRCS) $(RDMACM_HDRS) provider/rdmacm/librdmacm.map $(LIBDIR)/libibverbs.so.1
	@mkdir -p $(LIBDIR)
	$(CC) $(PROVIDER_CFLAGS) -shared -Wl,-soname,librdmacm.so.1 -Wl,--version-script=provider/rdmacm/librdmacm.map \
		-Wl,-z,defs -o $@ $(RDMACM_SRCS) $(LIBDIR)/libibverbs.so.1 -lpthread

$(LIBDIR)/lib%.so.1: provider/stubs/%.c provider/stubs/%.map
	@mkdir -p $(LIBDIR)
	$(CC) $(PROVIDER_CFLAGS) -shared -Wl,-soname,lib$*.so.1 -Wl,--version-script=provider/stubs/$*.map -Wl,-z,defs -o $@ $<

install: build
	install -D -m 0755 bin/xdproce $(DESTDIR)$(PREFIX)/bin/xdproce
	install -d $(DESTDIR)$(PREFIX)/lib/xdproce
	install -m 0644 $(LIBDIR)/libibverbs.so.1 $(LIBDIR)/librdmacm.so.1 $(LIBDIR)/libmlx5.so.1 $(LIBDIR)/libefa.so.1 $(DESTDIR)$(PREFIX)/lib/xdproce/

generate: deps deps-bpf generate-abi
	$(GO) generate $(BPF_PKGS)

# The committed BPF objects must be reproducible from their C sources.
check-generate: generate
	@git diff --exit-code --stat -- bpf impair || \
		(echo "generated BPF objects differ from the committed ones: run 'make generate' and commit"; exit 1)

# The ABI header the C provider includes, written from package uverbs's layouts and control-message
# bodies (Go only: no clang).
ABI_HEADER := provider/common/xp_abi.h
generate-abi:
	$(GO) generate ./uverbs

# The committed ABI header must be what generate-abi writes (uverbs's TestABI* check it too).
check-abi: generate-abi
	@git diff --exit-code --stat -- $(ABI_HEADER) || \
		(echo "$(ABI_HEADER) differs from what uverbs generates: run 'make generate-abi' and commit"; exit 1)

lint: deps
	@fmt=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_bpfe[lb]\.go$$')); \
		if [ -n "$$fmt" ]; then echo "gofmt needed:"; echo "$$fmt"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# Every test: unit, golden-pcap, fuzz seeds and the network-namespace tests (these need root),
# the transport under the race detector, then the interop smoke against stock perftest on
# Linux rxe in a VM (test/interop --smoke).
# Fuzz budgets are counts of inputs, not durations: Go 1.26's fuzzing coordinator can fail a
# run that ends on its -fuzztime deadline with a bare "context deadline exceeded" (golang/go#75804,
# fixed in Go 1.27), which a loaded CI machine meets. The counts take about 10-20 s each here
# in make test and about a minute each in make fuzz.
test: deps deps-stock deps-abi check-abi check-generate lint build
	$(SUDO) env "PATH=$$PATH" CI=$${CI:-} $(GO) test $(GOTESTFLAGS) ./...
	cd internal/tools/movedecl && $(GO) test ./...  # its own module: ./... above leaves it out
	$(MAKE) race
	$(GO) test -run '^$$' -fuzz '^FuzzTransport$$' -fuzztime 20000x ./verbs
	$(GO) test -run '^$$' -fuzz '^FuzzSharedRings$$' -fuzztime 10000x ./verbs
	$(SUDO) env "PATH=$$PATH" $(GO) test -run '^$$' -fuzz '^FuzzControl$$' -fuzztime 100000x ./daemon
	$(SUDO) env "PATH=$$PATH" $(GO) test -run '^$$' -fuzz '^FuzzHostile$$' -fuzztime 300x ./daemon
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 500000x ./cm
	$(GO) test -run '^$$' -fuzz '^FuzzReceive$$' -fuzztime 300000x ./cmagent
	$(SUDO) env "PATH=$$PATH" $(GO) run ./test/interop --smoke

# The transport under the race detector: the engine and the application goroutines that
# post, poll and run it. The detector also slows the engine down, which is how the
# retransmission storm of issue 18 was found. perftest is left out: its tools spin on
# memory the engine writes and reuse receive buffers in a cycle, as perftest does on
# hardware, where a NIC's DMA is no Go memory access either.
RACE_PKGS ?= ./verbs/ ./internal/transport/ ./internal/engine/ ./internal/queue/ ./internal/sharedring/ ./link/... ./nic/ ./wire/ ./daemon/ ./ipc/ ./cmagent/ ./rdmacm/
race: deps
	$(SUDO) env "PATH=$$PATH" CI=$${CI:-} $(GO) test -race -count=1 -timeout 15m $(RACE_PKGS)

unit: deps
	$(GO) test $(GOTESTFLAGS) -short ./...

bench: deps
	$(SUDO) env "PATH=$$PATH" $(GO) test -run '^$$' -bench . -benchmem ./...

fuzz: deps
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 3000000x ./wire
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeSplit$$' -fuzztime 3000000x ./wire
	$(GO) test -run '^$$' -fuzz '^FuzzTransport$$' -fuzztime 30000x ./verbs
	$(GO) test -run '^$$' -fuzz '^FuzzSharedRings$$' -fuzztime 50000x ./verbs
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 40000x ./uverbs
	$(GO) test -run '^$$' -fuzz '^FuzzMsgBodies$$' -fuzztime 2000000x ./uverbs
	$(SUDO) env "PATH=$$PATH" $(GO) test -run '^$$' -fuzz '^FuzzControl$$' -fuzztime 600000x ./daemon
	$(SUDO) env "PATH=$$PATH" $(GO) test -run '^$$' -fuzz '^FuzzHostile$$' -fuzztime 3000x ./daemon
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 4000000x ./cm
	$(GO) test -run '^$$' -fuzz '^FuzzReceive$$' -fuzztime 2000000x ./cmagent
	$(SUDO) env "PATH=$$PATH" $(GO) test -run '^$$' -fuzz '^FuzzFastPath$$' -fuzztime 400000x ./loader
	$(SUDO) env "PATH=$$PATH" $(GO) test -run '^$$' -fuzz '^FuzzFastPathAck$$' -fuzztime 300000x ./loader

# The main job: two network namespaces, xdproce in each, measured against kernel TCP
# (tables on stdout; figures in bin/bench.json, bandwidth plot in bin/bench.svg).
demo: deps-stock build
	$(SUDO) ./bin/xdproce bench --json bin/bench.json --plot bin/bench.svg

# Interoperability with stock perftest on Linux Soft-RoCE (rdma_rxe) in QEMU VMs, both
# roles, plus an rxe<->rxe reference (test/interop; the first run builds the VM image,
# a few minutes; slow under emulation). INTEROPFLAGS: e.g. --only REGEX --json FILE --keep.
interop: build
	$(SUDO) env "PATH=$$PATH" $(GO) run ./test/interop $(INTEROPFLAGS)

# What CI runs: ib_write_bw and ib_send_lat, both directions, MTU 4096.
interop-smoke: build
	$(SUDO) env "PATH=$$PATH" $(GO) run ./test/interop --smoke $(INTEROPFLAGS)

clean:
	rm -rf bin
