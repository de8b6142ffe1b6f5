# noisylab: `make lab` runs the real-clock article lab; `make test` runs every check.
CARGO ?= cargo
BIN := target/release/noisylab

.PHONY: lab lab-redis lab-postgres test build report bench calibrate bands docs shims peers

build:
	$(CARGO) build --release --locked

# About seven minutes: 5 strategies x 3 runs on real timers, then the report
# regenerated and the new results validated: against the model on the same
# seeds (the verdict, and make's exit status: docs/validation.md), then
# against the post's figures and the model's seed bands.
lab: build
	$(BIN) run lab/article.toml
	$(BIN) report > /dev/null
	$(BIN) validate

# The article lab on a real Redis server (one the lab starts and stops, on a
# free loopback port), the workers in 4 processes; then the report and the
# verdict against the model. Needs redis-server (Debian: apt-get install
# redis-server).
lab-redis: build
	$(BIN) run lab/article.toml --backend redis
	$(BIN) report > /dev/null
	$(BIN) validate

# The article lab on PostgreSQL: a cluster the lab makes in a temp folder
# and starts on a free loopback port (fsync on), the workers in 4
# processes; then the report and the verdict. Needs PostgreSQL's initdb
# and postgres (Debian: apt-get install postgresql).
lab-postgres: build
	$(BIN) run lab/article.toml --backend postgres
	$(BIN) report > /dev/null
	$(BIN) validate

# Regenerate reports/README.md and reports/plots/ from the saved results alone.
report: build
	$(BIN) report

test:
	@command -v redis-server > /dev/null || echo "make test: redis-server is not on PATH: the Redis backend's tests pass without running (apt-get install redis-server to run them)"
	@command -v initdb > /dev/null || ls /usr/lib/postgresql/*/bin/initdb > /dev/null 2>&1 || echo "make test: PostgreSQL's initdb is not on PATH nor under /usr/lib/postgresql: the PostgreSQL backend's tests pass without running (apt-get install postgresql to run them)"
	$(CARGO) fmt --check
	$(CARGO) clippy --locked --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --locked
	$(CARGO) test --locked --all-targets

# Scheduler cost by tenant count (ours beside the naive scans), the virtual
# article lab, and the scale scenario's wall time and memory, without and
# with the provider's limits and retrying clients; then the Redis functions'
# throughput beside redis-benchmark and their server time at a million
# queued jobs (skipped in one line without redis-server); then the SQL
# functions' take time by jobs queued, to a million, their throughput
# beside pgbench and a 2,000-job burst's entry (skipped in one line without
# PostgreSQL). On each server first its bare round trip, back to back and
# after 100 ms asleep (as a worker's call after its job); then BullMQ and
# graphile-worker beside the fair queue (add, drain, pickup on an idle pool),
# written to reports/bench/ (skipped in one line without Node.js); last the
# PostgreSQL drain again, ours and graphile-worker's, with fsync off.
bench: build peers
	$(CARGO) bench --locked --bench sched
	$(CARGO) bench --locked --bench queue
	$(CARGO) bench --locked --bench table
	$(BIN) run lab/scale.toml --clock virtual --format json > /dev/null
	$(BIN) run lab/scale-limits.toml --clock virtual --format json > /dev/null

calibrate: build
	$(BIN) calibrate

# What the model itself gives over 100 seeds (virtual clock, under a second).
bands: build
	$(BIN) bands lab/article.toml --seeds 100

# Rewrite the tables and excerpts between `<!-- generated: … -->` markers in
# README.md and docs/ with what the command each marker names prints now
# (from the committed files and the virtual clock); `make test` fails when
# one is out of date.
docs:
	NOISYLAB_WRITE_DOCS=1 $(CARGO) test --locked --test docs -- generated_blocks

# The shims of a team's own queue (docs/your-queue.md): BullMQ's packages
# as package-lock.json pins them, and Celery's as requirements.txt pins
# them, in a virtual environment under target/. `make test` runs them
# where they are installed (and says so in one line where not).
shims:
	npm ci --prefix src/shims/bullmq --no-audit --no-fund
	python3 -m venv target/shims/celery
	target/shims/celery/bin/pip install --quiet --disable-pip-version-check -r src/shims/celery/requirements.txt

# The queues make bench measures beside ours (src/peers/: BullMQ, graphile-
# worker), as package-lock.json pins them; without npm, one line.
peers:
	@if command -v npm > /dev/null; then npm ci --prefix src/peers --no-audit --no-fund; \
	else echo "make peers: npm is not on PATH: make bench skips the peers (apt-get install nodejs npm)"; fi
