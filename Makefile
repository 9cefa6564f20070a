# tenure: build, demo and test on a Debian 12 machine (as root).
#
# One build profile everywhere: `dev` (its dependencies are opt-level 2, see
# Cargo.toml). `make build`, `make demo` and `make test` share target/debug, so
# no dependency is compiled twice; only the tenure crate itself is built both
# without the `testbed` feature (build, demo) and with it (test: its
# dev-dependency turns it on; docs/packaging.md).

CARGO     ?= cargo
TENURE    := target/debug/tenure
# Debian packages the demo and the tests need. etcd-server/-client: the DCS;
# postgresql-15: the database; protobuf-compiler and libprotobuf-dev (the well-known
# .proto files protoc imports; a recommend, so --no-install-recommends drops it):
# etcd-client's build; iproute2,
# nftables: partition tests; haproxy: routing tests; fuse3: the watchdog stand-in;
# dpkg-dev (dpkg-shlibdeps), rpm (rpmbuild), lintian, systemd (systemd-analyze,
# systemd-sysusers), binutils (strip): `make deb`/`make rpm` and tests/real_package.rs;
# curl: tests/real_api_tls.rs (an https client that is not ours); dnsmasq-base:
# tests/real_srv.rs (a real DNS server for `[etcd] srv`); pgbackrest:
# tests/real_replica_methods.rs (replicas built from a backup).
DEB_PACKAGES := etcd-server etcd-client postgresql-15 protobuf-compiler libprotobuf-dev iproute2 nftables haproxy fuse3 dpkg-dev rpm lintian systemd binutils curl openssl dnsmasq-base pgbackrest
# The version the packages carry: Cargo.toml's (build-*.sh check the binary says it).
VERSION   := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -n1)
PACKAGES  := target/packages

.PHONY: all deps print-deps check-deps build demo test soak soak-real soak-hour bench bench-deps lint deny deb rpm clean

all: build

# Install only what is missing; `apt-get update` once, and only if needed.
deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' "$$p" 2>/dev/null | grep -q '^install ok installed$$' || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then \
	  echo "deps: all present ($(DEB_PACKAGES))"; \
	elif [ "$$(id -u)" != 0 ]; then \
	  echo "deps: missing:$$missing - run \`make deps\` as root" >&2; exit 1; \
	else \
	  echo "deps: installing$$missing"; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

# The list, for .ci/run (one list, not two).
print-deps:
	@echo $(DEB_PACKAGES)

# Every system file the build and tests use must come from the list (or its hard
# dependencies): a machine that already has everything cannot notice a gap.
check-deps:
	packaging/check-deps.sh "$(DEB_PACKAGES)"

build:
	$(CARGO) build --bins

demo: deps build
	$(TENURE) demo

# `cargo nextest run` builds the test binaries (and the `tenure` binary they run)
# with the same dev profile as `make build`. It also builds the examples, among
# them the watchdog stand-in (target/debug/examples/wdt_standin) that
# tests/real_watchdog_standin.rs and the agent tests run.
test: deps
	@$(CARGO) nextest --version >/dev/null 2>&1 || $(CARGO) install cargo-nextest --locked
	$(CARGO) nextest run --profile ci

# A longer seeded simulation of the core (20,000 schedules, ~7 min, half of them in
# synchronous mode) from a seed base picked from the clock, so each soak covers new
# schedules (TENURE_SIM_SEED_BASE=B replays a run; it is printed first); a failing seed
# prints itself and how to replay it (TENURE_SIM_SEED=N). Then 5,000 schedules
# (TENURE_SIM_LATE_SEEDS) in the late-PUT mode (TENURE_SIM_LATE_PUTS=1: some `leader`
# PUTs reach some watches 50-450 ms late, the race the acquisition record closes),
# from a base of their own, also printed.
soak:
	TENURE_SIM_SEEDS=$${TENURE_SIM_SEEDS:-20000} \
	  TENURE_SIM_SEED_BASE=$${TENURE_SIM_SEED_BASE:-$$(( $$(date +%s) % 100000 * 20000 ))} \
	  $(CARGO) test --test sim -- --nocapture
	TENURE_SIM_LATE_PUTS=1 TENURE_SIM_SEEDS=$${TENURE_SIM_LATE_SEEDS:-5000} \
	  TENURE_SIM_SEED_BASE=$$(( 2000000000 + $$(date +%s) % 100000 * 5000 )) \
	  $(CARGO) test --test sim sim_schedules -- --nocapture
	$(MAKE) soak-real

# The real-parts half of the soak (tests/real_soak.rs, #[ignore]d so `make test`
# skips it): one cluster in network namespaces, watchdog stand-ins required, a
# random fault per round, the invariants checked every round (~1 min a round).
# TENURE_SOAK_SEED (printed first; default from the clock) replays a run,
# TENURE_SOAK_ROUNDS (default 12) sets its length; both pass through the
# environment. --no-capture: one line per round as it happens.
soak-real: deps
	@$(CARGO) nextest --version >/dev/null 2>&1 || $(CARGO) install cargo-nextest --locked
	$(CARGO) nextest run --profile ci --run-ignored only --test real_soak --no-capture

# Benchmarks (bench/, results and method in docs/benchmarks.md). `cargo bench`
# builds the release profile (target/release, once); `make test` never builds it
# (bench targets are not test targets). The real-part ones skip with a message
# without root, etcd or PostgreSQL; knobs: TENURE_BENCH_ROUNDS (host crashes, 5),
# TENURE_BENCH_SWITCHOVERS (3), TENURE_BENCH_SWITCHOVER_ROUNDS (10), TENURE_BENCH_SECONDS (footprint window, 60),
# TENURE_BENCH_RENEWALS (2000), TENURE_BENCH_READS (1000), TENURE_BENCH_PACED (100),
# TENURE_BENCH_FAILOVER_N (10) and TENURE_BENCH_FAILOVER_CONFIGS (wd7,sync4,ttl30,revoke7)
# for failover_dist, whose wd7 needs the watchdog stand-in (a debug example).
# loop_stress (issue 13): TENURE_BENCH_STRESS_RUNS (idle,stress,stress-rt-mlock),
# TENURE_BENCH_STRESS_SECONDS (180 per run); its agents are a release build with the
# bench-only `count-allocs` feature (never the shipped binary), copied aside
# before `cargo bench` rebuilds target/release/tenure with the test bed.
# etcd_fleet (issue 13 item 5): TENURE_BENCH_FLEET_STEPS (3,30,...,2880 agents),
# TENURE_BENCH_FLEET_SECONDS (20), TENURE_BENCH_FLEET_PATTERNS (today,watchview),
# TENURE_BENCH_FLEET_LOOP_MS (500), TENURE_BENCH_FLEET_BUDGET (540 s for the run).
# lease_poll_transport (issue 13 item 2): TENURE_BENCH_POLLS (1000),
# TENURE_BENCH_POLL_GAP_MS (20), TENURE_BENCH_ROUNDS (2); about 3 minutes.
BENCHES := core_step renewal agent_footprint failover switchover failover_dist loop_stress etcd_fleet lease_poll_transport
# Debian packages only the benchmarks need (not `make test`, not DEB_PACKAGES):
# stress-ng loads the host for loop_stress.
BENCH_PACKAGES := stress-ng
COUNTING_AGENT := target/release/tenure-count-allocs
# The agent as shipped (release profile, no test bed): agent_footprint measures it.
SHIPPED_AGENT := target/release/tenure-shipped

bench-deps:
	@missing=""; \
	for p in $(BENCH_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' "$$p" 2>/dev/null | grep -q '^install ok installed$$' || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then \
	  echo "bench-deps: all present ($(BENCH_PACKAGES))"; \
	elif [ "$$(id -u)" != 0 ]; then \
	  echo "bench-deps: missing:$$missing - run \`make bench-deps\` as root" >&2; exit 1; \
	else \
	  echo "bench-deps: installing$$missing"; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

bench: deps bench-deps
	$(CARGO) build --release --bin tenure
	cp target/release/tenure $(SHIPPED_AGENT)
	$(CARGO) build --release --bin tenure --features count-allocs
	cp target/release/tenure $(COUNTING_AGENT)
	$(CARGO) build --example wdt_standin
	$(CARGO) bench --no-run $(addprefix --bench ,$(BENCHES))
	@for b in $(BENCHES); do \
	  echo; echo "=== $$b ==="; \
	  if [ "$$b" = loop_stress ]; then \
	    TENURE_BENCH_AGENT=$(CURDIR)/$(COUNTING_AGENT) $(CARGO) bench -q --bench $$b || exit 1; \
	  elif [ "$$b" = agent_footprint ]; then \
	    TENURE_BENCH_AGENT=$(CURDIR)/$(SHIPPED_AGENT) $(CARGO) bench -q --bench $$b || exit 1; \
	  else \
	    $(CARGO) bench -q --bench $$b || exit 1; \
	  fi; \
	done

# An hour of a loaded host with tight timing (issue 13 item 3, bench/soak_hour.rs,
# docs/benchmarks.md §10): a 3-node cluster per configuration under stress-ng, the
# watchdog stand-in required, a write probe; fails on any failover, fence or reset.
# Not part of `make test` or `make bench`. TENURE_SOAK_CONFIGS picks the
# configurations (ttl7, ttl5; several run side by side), TENURE_SOAK_SECONDS the
# window (3600).
soak-hour: deps bench-deps
	$(CARGO) build --example wdt_standin
	$(CARGO) bench --bench soak_hour

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

# Licences, banned crates and sources (deny.toml). Not advisories: that check needs
# the RustSec database from github.com, which the build machine cannot reach
# (docs/packaging.md). cargo-deny is compiled once (~4 min on 2 cores).
deny:
	@$(CARGO) deny --version >/dev/null 2>&1 || $(CARGO) install cargo-deny --locked
	$(CARGO) deny check --hide-inclusion-graph licenses bans sources

# Packages for shipping, from the release profile (docs/packaging.md). The tests
# package the dev binary `make test` built instead (tests/real_package.rs).
deb: deps
	$(CARGO) build --release --bin tenure
	packaging/build-deb.sh target/release/tenure $(VERSION) $(PACKAGES)

rpm: deps
	$(CARGO) build --release --bin tenure
	packaging/build-rpm.sh target/release/tenure $(VERSION) $(PACKAGES)

clean:
	$(CARGO) clean
