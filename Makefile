# The two commands of the README: `make demo` (the main job) and `make test`;
# `make images` builds every image (the control image of docker-compose.yml too).
GO ?= go

.PHONY: deps run-deps demo test images

# What the tests need; a run (demo, images) needs less: no browser, no
# Python packages, no host Redis.
deps:
	./.ci/deps

run-deps:
	./.ci/deps run

# The default test: Redis, unfenced counter, pauses, 30 s. It is expected to
# come out invalid (exit 1): an expiring lock alone lets a paused holder
# write late. Each stage prints one line (.ci/stage keeps its output unless it
# fails). The host binary is built static with the flags the images' binary
# is built with, so that build reuses every compiled package (one compile,
# not two); the images are only those the run needs.
SPLITBRAIN_STATIC = CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags='-s -w'

demo: run-deps
	@./.ci/stage "Go modules" $(GO) list -deps ./cmd/splitbrain
	@./.ci/stage "static build" env $(SPLITBRAIN_STATIC) -o bin/splitbrain ./cmd/splitbrain
	@./.ci/stage "images (store, client, redis)" ./bin/splitbrain images build --roles store,client,redis
	@./bin/splitbrain run --target redis --workload unfenced-counter --nemesis pause --time-limit 30s; \
	code=$$?; \
	if [ $$code = 1 ]; then echo "demo: invalid (exit 1), as expected for an unfenced lock; see results/latest/"; exit 0; fi; \
	exit $$code

images: run-deps
	$(GO) run ./cmd/splitbrain images build

test: deps
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) test -count=1 -timeout 60m ./...
	$(GO) test -run '^$$' -fuzz FuzzRead -fuzztime 10s ./history/
	$(GO) test -run '^$$' -fuzz FuzzCheck -fuzztime 10s ./checkers/
