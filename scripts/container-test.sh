#!/usr/bin/env bash
# The server's image built from docker/Dockerfile and run as users run it, with podman:
#
#   scripts/container-test.sh          (as root; `make test` runs it after the Swift suite)
#
# It builds the image (base images made here when no registry is reachable: see "Base
# images"), then checks, each on containers and volumes of its own:
#   image           the server runs as a user other than root; no compiler or toolchain in the image
#   health          the image's HEALTHCHECK passes (podman healthcheck run); /readyz answers from the host
#   readme          docker/compose.yaml through podman-compose, with the README's commands as written
#                   (`podman-compose` for `docker compose`): the token through exec, then a push and a
#                   pull with it from the host; the service's settings as the container got them;
#                   `backup` and `check` inside the container on its volumes
#   volume          a named volume keeps the data (and the token secret) across removing and
#                   recreating the container
#   sigterm         podman stop (SIGTERM) ends the server within its grace period, cleanly, while it
#                   takes writes and holds a long poll; every acknowledged write is there after a restart
#   unwritable      a /data the server's user cannot write stops the container once, with a message
#                   that says so
# It ends with "container-test: N passed, N failed" and exits 1 when any check failed.
#
# OUTPOST_CONTAINER_TEST_IMAGE=IMAGE checks IMAGE instead of building one (an image under
# investigation, or a deliberately broken one); OUTPOST_CONTAINER_TEST_CHECKS="health
# sigterm" runs only those checks; OUTPOST_CONTAINER_TEST_KEEP=1 leaves the containers,
# volumes and the built image in place for a look (podman ps -a --filter
# label=outpost-container-test).
#
# Settings this machine needs, and only this script uses (docs/deploying.md has the plain
# commands): podman's own configuration file, CONTAINERS_CONF below, picks runc (Debian's
# crun refuses hybrid cgroups) and cgroupfs, and sets no default ulimits (podman's default
# nofile is above what this machine lets a container have); compose's ulimits are lowered
# to what a container here may have, in an override file.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
started=$SECONDS

if [ "$(id -u)" -ne 0 ]; then
  echo "container-test: run as root (rootful podman, debootstrap)" >&2
  exit 1
fi
for tool in podman runc debootstrap curl python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "container-test: $tool is missing; installing the test packages"; scripts/install-deps.sh test; break; }
done
compose_version="$(sed -n 's/^ *podman_compose_version=//p' scripts/install-deps.sh)"
podman_compose="$root/.build/tools/podman-compose-$compose_version/bin/podman-compose"
[ -x "$podman_compose" ] || scripts/install-deps.sh test

run_id="oct-$$-$(date +%s)"
work="$(mktemp -d "/tmp/outpost-container-test.XXXXXX")"
label="outpost-container-test=$run_id"

export CONTAINERS_CONF="$work/containers.conf"
cat >"$CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF

# podman, with its complaint about systemd timers for health checks left out of what it
# prints on standard error (there is no systemd here; `podman healthcheck run` needs none).
pms() {
  local err="$work/podman-stderr.$BASHPID" status=0
  podman "$@" 2>"$err" || status=$?
  grep -v 'unable to get systemd connection' "$err" >&2 || true
  rm -f "$err"
  return "$status"
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ "${OUTPOST_CONTAINER_TEST_KEEP:-}" != 1 ]; then
    for project in $(cat "$work/projects" 2>/dev/null); do
      (cd "$root" && PUBLISH=127.0.0.1: "$podman_compose" -p "$project" -f docker/compose.yaml down -v -t 0 >/dev/null 2>&1) || true
    done
    podman ps -a -q --filter "label=$label" | xargs -r podman rm -f -t 0 >/dev/null 2>&1 || true
    podman volume ls -q --filter "label=$label" | xargs -r podman volume rm -f >/dev/null 2>&1 || true
    if [ -n "${built_image:-}" ]; then podman rmi -f "$built_image" >/dev/null 2>&1 || true; fi
    rm -rf "$work"
  else
    echo "container-test: kept $work and everything labelled $label"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits until COMMAND succeeds, trying every 0.2 s, for at most SECONDS; fails with WHAT.
wait_for() {
  local what="$1" seconds="$2"
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "$what: not within ${seconds}s" >&2
      return 1
    fi
    sleep 0.2
  done
}

fail() {
  echo "$*" >&2
  return 1
}

# ---------------------------------------------------------------------------------------
# Base images. No registry is reachable here, so the two images docker/Dockerfile starts
# from are made on this machine and passed as build arguments (the Dockerfile's defaults
# stay the official swift:6.3-bookworm and debian:bookworm-slim):
#   localhost/outpost-test/debian:bookworm-slim   debootstrap's minimal Debian 12
#   localhost/outpost-test/swift:VERSION-bookworm that, with the packages the official
#                                                 Swift image installs and this machine's
#                                                 toolchain (/opt/swift) in /usr
# They are the cache: kept in podman's own store across runs and made again only when
# their recipe (this section's text, and the toolchain's version) changes, so a fresh
# machine makes them once (about 6 minutes). Nothing else of a run is kept.

base_recipe() { sed -n '/^# Base images\./,/^# End of base images\./p' "$0"; }
debian_image=localhost/outpost-test/debian:bookworm-slim
toolchain="${OUTPOST_CONTAINER_TEST_TOOLCHAIN:-/opt/swift}"
swift_version="$("$toolchain/usr/bin/swift" --version 2>/dev/null | sed -n 's/.*Swift version \([0-9.]*\).*/\1/p' | head -1)"
[ -n "$swift_version" ] || { echo "container-test: no Swift toolchain at $toolchain" >&2; exit 1; }
swift_image="localhost/outpost-test/swift:$swift_version-bookworm"
debian_key="$(base_recipe | sha256sum | cut -c1-16)"
swift_key="$( (base_recipe; echo "$swift_version"; sed -n 's/^packages=(\(.*\))$/\1/p' scripts/install-deps.sh) | sha256sum | cut -c1-16)"

has_image() {  # IMAGE KEY: the image exists and was made by this recipe
  [ "$(podman image inspect --format '{{index .Labels "outpost.recipe"}}' "$1" 2>/dev/null)" = "$2" ]
}

make_debian_image() {
  local rootfs="$work/rootfs"
  echo "container-test: making $debian_image with debootstrap"
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; return 1; }
  # The official image's sources: the release, its updates and its security updates.
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # The slim image's settings: no documentation, manuals or translations, and no package
  # files or caches left behind by apt-get.
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/slim" <<'SLIM'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
SLIM
  cat >"$rootfs/etc/apt/apt.conf.d/slim-clean" <<'SLIM'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
SLIM
  find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
    "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -c . | pms import --change "LABEL outpost.recipe=$debian_key" --change 'CMD ["bash"]' - "$debian_image" >/dev/null
  rm -rf "$rootfs"
}

make_swift_image() {
  echo "container-test: making $swift_image from $toolchain"
  # The official Swift image's packages, and the build packages of scripts/install-deps.sh.
  local packages
  packages="binutils-gold libicu-dev libcurl4-openssl-dev libedit-dev libsqlite3-dev libncurses-dev libpython3-dev libxml2-dev pkg-config uuid-dev tzdata git gcc libstdc++-12-dev ca-certificates $(sed -n 's/^packages=(\(.*\))$/\1/p' scripts/install-deps.sh)"
  cat >"$work/swift.Containerfile" <<EOF
FROM $debian_image
RUN export DEBIAN_FRONTEND=noninteractive && apt-get -q update && apt-get -q install -y --no-install-recommends $packages && rm -rf /var/lib/apt/lists/*
COPY usr/ /usr/
LABEL outpost.recipe=$swift_key
EOF
  pms build --layers=false -f "$work/swift.Containerfile" -t "$swift_image" "$toolchain" >"$work/swift-image.log" 2>&1 \
    || { tail -30 "$work/swift-image.log" >&2; return 1; }
}
# End of base images.

image="${OUTPOST_CONTAINER_TEST_IMAGE:-}"
if [ -z "$image" ]; then
  # One run at a time makes the cached images.
  exec 9>/tmp/outpost-container-test.lock
  flock 9
  # A stale image (another recipe) is removed first, the Swift image before the one it is
  # built on, so that the store keeps one of each.
  if ! has_image "$swift_image" "$swift_key" || ! has_image "$debian_image" "$debian_key"; then
    podman rmi "$swift_image" >/dev/null 2>&1 || true
  fi
  if ! has_image "$debian_image" "$debian_key"; then
    podman rmi "$debian_image" >/dev/null 2>&1 || true
    make_debian_image
  fi
  has_image "$swift_image" "$swift_key" || make_swift_image
  flock -u 9
  image="localhost/outpost-test/outpost-server:$run_id"
  built_image="$image"
  echo "container-test: building $image from docker/Dockerfile (a release build: several minutes)"
  build_started=$SECONDS
  # --format docker: the OCI format has no HEALTHCHECK, and podman would drop it.
  if ! pms build --format docker --layers=false -f docker/Dockerfile \
      --build-arg SWIFT_IMAGE="$swift_image" --build-arg RUNTIME_IMAGE="$debian_image" \
      -t "$image" . >"$work/build.log" 2>&1; then
    tail -40 "$work/build.log" >&2
    echo "container-test: the image did not build" >&2
    exit 1
  fi
  echo "container-test: built in $((SECONDS - build_started))s"
fi
size="$(podman image inspect --format '{{.Size}}' "$image")"
echo "container-test: image $image, $((size / 1000000)) MB"

# ---------------------------------------------------------------------------------------
# Helpers for the checks.

# Starts a container of the image as docs/deploying.md runs it, with a free loopback port
# (podman picks it) and the given extra options; prints nothing.
run_server() {
  local name="$1"
  shift
  pms run -d --name "$name" --label "$label" -p 127.0.0.1::8080 "$@" "$image" >/dev/null
}
new_volume() { pms volume create --label "$label" "$1" >/dev/null; }
host_url() { echo "http://$(podman port "$1" 8080 | head -1)"; }
ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1/readyz")" = 200 ]; }
wait_ready() { wait_for "$1 answering /readyz from the host" 60 ready "$(host_url "$1")"; }
state() { podman inspect --format "{{$2}}" "$1"; }

# POST one push of changes c_PREFIX_I for I in FROM..TO to the space; prints the answer.
push_records() {
  local url="$1" token="$2" space="$3" prefix="$4" from="$5" to="$6"
  local body
  body="$(python3 -c '
import json, sys
prefix, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print(json.dumps({"clientId": "container-test", "changes": [
    {"changeId": f"c-{prefix}-{i}", "collection": "todos", "id": f"{prefix}-{i}", "op": "put",
     "data": {"title": f"record {i}"}, "baseVersion": None} for i in range(a, b + 1)]}))' "$prefix" "$from" "$to")"
  curl -s --max-time 30 -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d "$body" "$url/v1/spaces/$space/push"
}

# Every record of the space as "id version" lines (all pages).
pull_all() {
  local url="$1" token="$2" space="$3"
  python3 - "$url" "$token" "$space" <<'PY'
import json, sys, urllib.request
url, token, space = sys.argv[1:4]
since = None
while True:
    query = "limit=1000" + (f"&since={since}" if since else "")
    request = urllib.request.Request(f"{url}/v1/spaces/{space}/pull?{query}", headers={"Authorization": f"Bearer {token}"})
    page = json.load(urllib.request.urlopen(request, timeout=30))
    for record in page["changes"]:
        print(record["id"], record["version"])
    since = page["next"]
    if not page["hasMore"]:
        break
PY
}

# Fails unless every change of a push answer was applied.
all_applied() {
  python3 -c '
import json, sys
try:
    results = json.loads(sys.argv[1])["results"]
except (ValueError, KeyError, TypeError):
    sys.exit(1)
sys.exit(1 if not results or any(r["status"] != "applied" for r in results) else 0)' "$1"
}

# ---------------------------------------------------------------------------------------
# The checks. Each runs in a subshell of its own; a failure is reported and the next runs.

check_image() {
  local user
  user="$(podman image inspect --format '{{.User}}' "$image")"
  case "${user%%:*}" in
    "" | root | 0) fail "the image's USER is '${user}': the server would run as root" ;;
  esac
  new_volume "$run_id-image"
  run_server "$run_id-image" -v "$run_id-image:/data"
  wait_ready "$run_id-image"
  # The server process itself (PID 1 of the container), as the kernel sees it.
  local uid
  uid="$(podman exec "$run_id-image" sh -c 'sed -n "s/^Uid:[[:space:]]*\([0-9]*\).*/\1/p" /proc/1/status')"
  [ -n "$uid" ] && [ "$uid" != 0 ] || fail "the server runs as uid '$uid'"
  # The image's files, mounted from the host: no compiler, linker, assembler or Swift toolchain.
  local mount found
  mount="$(podman image mount "$image")"
  found="$(cd "$mount" && find . \( -type f -o -type l \) \( \( -path '*/bin/*' \( -name swift -o -name 'swift-*' -o -name swiftc \
      -o -name 'clang*' -o -name gcc -o -name 'gcc-[0-9]*' -o -name cc -o -name c++ -o -name 'g++*' -o -name ld -o -name 'ld.bfd' \
      -o -name 'ld.gold' -o -name 'ld.lld' -o -name lld -o -name as -o -name lldb -o -name make \) \) \
      -o -name cc1 -o -name cc1plus -o -name '*.swiftmodule' -o -name 'libswiftCore.so' -o -name 'libFoundation.so' -o -name '*.deb' \) \
      2>/dev/null | head -20)"
  podman image unmount "$image" >/dev/null
  [ -z "$found" ] || fail "the image holds a compiler or toolchain: $(echo "$found" | tr '\n' ' ')"
  echo "  uid $uid, USER $user, no toolchain; $size bytes"
}

check_health() {
  new_volume "$run_id-health"
  run_server "$run_id-health" -v "$run_id-health:/data"
  wait_ready "$run_id-health"
  local url answer
  url="$(host_url "$run_id-health")"
  answer="$(curl -s --max-time 5 "$url/readyz")"
  [ "$answer" = '{"status":"ready"}' ] || fail "/readyz from the host answered $answer"
  [ "$(state "$run_id-health" '.Config.Healthcheck.Test')" != "<nil>" ] || fail "the container has no health check"
  local result
  result="$(pms healthcheck run "$run_id-health" 2>&1)" || fail "podman healthcheck run: $result"
  [ "$(state "$run_id-health" '.State.Health.Status')" = healthy ] || fail "health after the check: $(state "$run_id-health" '.State.Health.Status')"
  echo "  /readyz $answer at $url; healthcheck: $(state "$run_id-health" '.State.Health.Status')"
}

check_readme() {
  local project="$run_id-compose"
  echo "$project" >>"$work/projects"
  # The image the test built stands for the one `--build` makes (it cannot build here: the
  # Dockerfile's official base images need a registry). Ulimits: see the top of the file.
  local limits nofile nproc
  limits="$(pms run --rm --entrypoint cat "$image" /proc/self/limits)"
  nofile="$(sed -n 's/^Max open files *[0-9]* *\([0-9]*\).*/\1/p' <<<"$limits")"
  nproc="$(sed -n 's/^Max processes *[0-9]* *\([0-9]*\).*/\1/p' <<<"$limits")"
  [ "$nofile" -gt 65536 ] && nofile=65536
  cat >"$work/compose.override.yaml" <<EOF
services:
  outpost:
    image: $image
    ulimits:
      nofile: { soft: $nofile, hard: $nofile }
      nproc: { soft: $nproc, hard: $nproc }
EOF
  # The README's commands, as written, with `podman-compose -p PROJECT` for `docker compose`
  # and the override after its `-f docker/compose.yaml`.
  local readme up token_command
  readme="$(sed -n '/^## Deploying/,/^## /p' README.md)"
  up="$(grep -m1 '^docker compose -f docker/compose.yaml up' <<<"$readme")" || fail "README's Deploying section has no 'docker compose … up'"
  token_command="$(grep -m1 '^docker compose -f docker/compose.yaml exec \(-T \)\?outpost outpost-server token' <<<"$readme")" \
    || fail "README's Deploying section has no token command"
  as_podman() {
    local line="$1"
    line="${line/docker compose -f docker\/compose.yaml/$podman_compose -p $project -f docker/compose.yaml -f $work/compose.override.yaml}"
    echo "${line/ --build/}"
  }
  echo "  \$ $up"
  PUBLISH=127.0.0.1: eval "$(as_podman "$up")" >"$work/compose-up.log" 2>&1 || { cat "$work/compose-up.log" >&2; fail "compose up failed"; }
  local container
  container="$(podman ps -q --filter "label=io.podman.compose.project=$project")"
  [ -n "$container" ] || fail "compose started no container"
  wait_ready "$container"
  echo "  \$ TOKEN=\$($token_command)"
  local token
  token="$(eval "$(as_podman "$token_command")" 2>"$work/token.err")" || { cat "$work/token.err" >&2; fail "the README's token command failed"; }
  [ "$(echo "$token" | tr -cd . | wc -c)" = 2 ] || fail "the token command printed '$token'"
  local url answer
  url="$(host_url "$container")"
  answer="$(push_records "$url" "$token" team-1 readme 1 3)"
  all_applied "$answer" || fail "push with the README's token: $answer"
  [ "$(pull_all "$url" "$token" team-1 | wc -l)" = 3 ] || fail "the pull did not return the 3 records pushed"
  echo "  push and pull from the host at $url with that token: 3 records"

  # The service as compose.yaml defines it reached the container.
  local env
  env="$(state "$container" '.Config.Env')"
  for setting in OUTPOST_METRICS_REQUIRE_ADMIN=true OUTPOST_SHUTDOWN_GRACE=10 OUTPOST_DATA=/data; do
    [[ "$env" == *"$setting"* ]] || fail "the container's environment lacks $setting: $env"
  done
  [ "$(state "$container" '.HostConfig.RestartPolicy.Name')" = unless-stopped ] || fail "restart policy: $(state "$container" '.HostConfig.RestartPolicy.Name')"
  local mounts
  mounts="$(state "$container" 'range .Mounts}}{{.Name}}:{{.Destination}} {{end')"
  [[ "$mounts" == *"${project}_outpost-data:/data"* && "$mounts" == *"${project}_outpost-backups:/backups"* ]] || fail "volumes: $mounts"

  # backup and check inside the container, on its volumes (compose.yaml's backup command).
  local backup_command
  backup_command="$(sed -n 's/^#   \(docker compose -f docker\/compose.yaml exec \(-T \)\?outpost outpost-server backup .*\)$/\1/p' docker/compose.yaml)"
  [ -n "$backup_command" ] || fail "docker/compose.yaml's header has no backup command"
  echo "  \$ $backup_command"
  local output
  output="$(eval "$(as_podman "$backup_command")" 2>&1)" || fail "backup in the container: $output"
  local backup
  backup="$(podman exec "$container" sh -c 'ls -1 /backups | tail -1')"
  [ -n "$backup" ] || fail "no backup in /backups after: $output"
  output="$(podman exec "$container" outpost-server check --data /data 2>&1)" || fail "check --data /data: $output"
  output="$(podman exec "$container" outpost-server check --data "/backups/$backup" 2>&1)" || fail "check of the backup: $output"
  echo "  backup /backups/$backup (volume ${project}_outpost-backups) and check of /data and of the backup pass"

  # compose's own stop: SIGTERM, and its stop_grace_period before SIGKILL.
  local before=$SECONDS
  "$podman_compose" -p "$project" -f docker/compose.yaml -f "$work/compose.override.yaml" stop >"$work/compose-stop.log" 2>&1 \
    || { cat "$work/compose-stop.log" >&2; fail "compose stop failed"; }
  [ "$(state "$container" '.State.ExitCode')" = 0 ] || fail "after compose stop, exit code $(state "$container" '.State.ExitCode')"
  echo "  compose stop: exit 0 in $((SECONDS - before))s"
}

check_volume() {
  local name="$run_id-volume"
  new_volume "$name"
  run_server "$name" -v "$name:/data"
  wait_ready "$name"
  local token url answer epoch
  token="$(pms exec "$name" outpost-server token --data /data --sub alice --space team-1 --scope write)"
  url="$(host_url "$name")"
  answer="$(push_records "$url" "$token" team-1 kept 1 50)"
  all_applied "$answer" || fail "push: $answer"
  epoch="$(curl -s "$url/v1/info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["epoch"])')"
  pms stop "$name" >/dev/null
  pms rm "$name" >/dev/null
  ! podman container exists "$name" || fail "the container is still there after podman rm"
  run_server "$name" -v "$name:/data"
  wait_ready "$name"
  url="$(host_url "$name")"
  # The same secret (the old token still works), the same store (records and epoch).
  [ "$(pull_all "$url" "$token" team-1 | wc -l)" = 50 ] || fail "after recreating the container, the pull with the old token did not return the 50 records"
  [ "$(curl -s "$url/v1/info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["epoch"])')" = "$epoch" ] || fail "the epoch changed"
  echo "  50 records, the token and epoch $epoch kept across podman rm and a new container on volume $name"
}

check_sigterm() {
  local name="$run_id-sigterm" grace=10
  # Not local: the EXIT trap below reads them after the function has returned.
  writer="" poller=""
  new_volume "$name"
  run_server "$name" -v "$name:/data" -e OUTPOST_SHUTDOWN_GRACE=$grace
  wait_ready "$name"
  local token url
  token="$(pms exec "$name" outpost-server token --data /data --sub w --space s1 --space s2 --scope write)"
  url="$(host_url "$name")"
  # A writer that pushes one record at a time until the server stops answering (or 5,000
  # pushes, or 120 s), writing down each change the server acknowledged as applied.
  python3 - "$url" "$token" "$work/acked" <<'PY' >"$work/writer.log" 2>&1 &
import json, sys, time, urllib.request
url, token, acked = sys.argv[1:4]
deadline = time.monotonic() + 120
with open(acked, "w") as out:
    for i in range(5000):
        if time.monotonic() > deadline:
            break
        body = json.dumps({"clientId": "writer", "changes": [{"changeId": f"w-{i}", "collection": "todos", "id": f"w-{i}",
                           "op": "put", "data": {"n": i}, "baseVersion": None}]}).encode()
        request = urllib.request.Request(f"{url}/v1/spaces/s1/push", data=body, method="POST",
                                         headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        try:
            answer = json.load(urllib.request.urlopen(request, timeout=30))
        except Exception as error:
            print("writer stopped:", error)
            break
        result = answer["results"][0]
        if result["status"] == "applied":
            print(result["changeId"].removeprefix("w-"), result["version"], file=out, flush=True)
PY
  writer=$!
  # A long poll waiting for writes to another space, which drain must end too.
  curl -s -o "$work/longpoll.out" -w '%{http_code}' --max-time 90 -H "Authorization: Bearer $token" \
    "$url/v1/spaces/s2/pull?wait=60000" >"$work/longpoll.status" 2>/dev/null &
  poller=$!
  # Both are stopped by their PIDs when the check ends early.
  trap 'kill $writer $poller 2>/dev/null || true' EXIT
  local admin
  admin="$(pms exec "$name" outpost-server token --data /data --sub operator --admin)"
  waiting() { [[ "$(curl -s --max-time 2 -H "Authorization: Bearer $admin" "$url/metrics")" == *$'\n'"outpost_long_polls_waiting 1"* ]]; }
  wait_for "the long poll to be waiting" 30 waiting
  acknowledged() { [ "$(wc -l <"$work/acked" 2>/dev/null || echo 0)" -ge "$1" ]; }
  wait_for "the writer's first 100 acknowledged writes" 60 acknowledged 100
  local before
  before="$(date +%s%N)"
  # podman's own timeout (before SIGKILL) is well past the grace, to see the server's.
  pms stop -t $((grace + 30)) "$name" >/dev/null
  local took_ms=$((($(date +%s%N) - before) / 1000000))
  local code
  code="$(state "$name" '.State.ExitCode')"
  wait "$writer" || true
  wait "$poller" || true
  [ "$code" = 0 ] || fail "after SIGTERM the server exited $code (137: killed), not 0; log: $(podman logs --tail 5 "$name" 2>&1)"
  [ "$took_ms" -le $((grace * 1000)) ] || fail "podman stop took ${took_ms} ms, more than the ${grace}s grace"
  local logs
  logs="$(podman logs "$name" 2>&1)"
  [[ "$logs" == *'"msg":"shutting down","signal":"SIGTERM"'* ]] || fail "the log has no SIGTERM shutdown line"
  # The held pull is answered by the drain (an empty page, as at its deadline), not cut.
  [ "$(cat "$work/longpoll.status")" = 200 ] || fail "the long poll got $(cat "$work/longpoll.status") (000: no answer) before the server ended"
  local acked
  acked="$(wc -l <"$work/acked")"
  pms start "$name" >/dev/null
  wait_ready "$name"
  pull_all "$(host_url "$name")" "$token" s1 | sed 's/^w-//' | sort >"$work/after"
  local lost
  lost="$(sort "$work/acked" | comm -23 - "$work/after" | head -5)"
  [ -z "$lost" ] || fail "acknowledged writes missing (or at another version) after the restart: $lost"
  echo "  stopped in ${took_ms} ms (grace ${grace}s), exit 0, long poll answered $(cat "$work/longpoll.status"); all $acked acknowledged writes there after a restart"
}

check_unwritable() {
  local name="$run_id-unwritable" dir="$work/root-owned-data"
  # A host directory made by root, as `mkdir` on the host makes one before a bind mount.
  mkdir -m 0755 "$dir"
  run_server "$name" -v "$dir:/data"
  exited() { [ "$(state "$name" '.State.Status')" = exited ]; }
  wait_for "the container to stop" 30 exited
  local code logs
  code="$(state "$name" '.State.ExitCode')"
  logs="$(podman logs "$name" 2>&1)"
  [ "$code" = 1 ] || fail "the container exited $code (a crash is 128 + a signal), not 1: $logs"
  [[ "$logs" == *"data directory /data is not writable by this process (uid 10001"* && "$logs" == *"chown -R 10001:10001"* ]] \
    || fail "the log does not say that /data is not writable and what to do: $logs"
  [[ "$logs" != *"listening on"* ]] || fail "the server listened: $logs"
  [ "$(echo "$logs" | grep -c 'not writable')" = 1 ] || fail "the message came more than once: $logs"
  [ "$(state "$name" '.RestartCount')" = 0 ] || fail "restarted $(state "$name" '.RestartCount') times"
  [ -z "$(ls -A "$dir")" ] || fail "the server wrote into the directory: $(ls -A "$dir")"
  echo "  exited 1 once: $logs"
}

passed=0
failed=0
for name in ${OUTPOST_CONTAINER_TEST_CHECKS:-image health readme volume sigterm unwritable}; do
  echo "container-test: $name"
  # Not in an `if`: bash ignores `set -e` in a condition, also inside a subshell.
  set +e
  (set -euo pipefail; "check_$name")
  status=$?
  set -e
  if [ "$status" = 0 ]; then
    passed=$((passed + 1))
    echo "ok - $name"
  else
    failed=$((failed + 1))
    echo "not ok - $name"
  fi
done
echo "container-test: took $((SECONDS - started))s"
echo "container-test: $passed passed, $failed failed"
[ "$failed" = 0 ]
