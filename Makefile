# noisylab: `make lab` runs the real-clock article lab; `make test` runs every check.
CARGO ?= cargo
BIN := target/release/noisylab

.PHONY: lab test build report bench calibrate

build:
	$(CARGO) build --release --locked

# About seven minutes: 5 strategies x 3 runs on real timers, then the report
# regenerated and the new results validated against the post. A failing check
# is reported, not treated as a failed build (README: "Validated against the post").
lab: build
	$(BIN) run lab/article.toml
	$(BIN) report > /dev/null
	$(BIN) validate || echo "validate: some of the post's claims do not hold here; see the checks above"

# Regenerate reports/README.md and reports/plots/ from the saved results alone.
report: build
	$(BIN) report

test:
	$(CARGO) fmt --check
	$(CARGO) clippy --locked --all-targets -- -D warnings
	$(CARGO) test --locked --all-targets

# Scheduler cost by tenant count (ours beside the naive scans), the virtual
# article lab, and the scale scenario's wall time and memory.
bench: build
	$(CARGO) bench --locked --bench sched
	$(BIN) run lab/scale.toml --clock virtual --format json > /dev/null

calibrate: build
	$(BIN) calibrate
