# Sourced by build.sh and test.sh: builds the module in module mode, offline,
# against Debian's Go packages (no proxy.golang.org, no download):
#   apt-get install golang-go golang-google-grpc-dev golang-github-golang-protobuf-1-5-dev
#
# Debian installs each Go module's source under /usr/share/gocode/src/<module
# path>. A directory `replace` could point there, but those go.mod files still
# require modules Debian does not ship (grpc's asks for envoyproxy's
# go-control-plane, cncf/udpa, google/uuid…), and module mode would then look
# them up. So offline_setup links each module's files into .offline/<module
# path>/ beside a go.mod that names the module and requires nothing (apt, not
# Go's version selection, made Debian's packages one consistent set), and
# writes .offline/debian.mod: this module's go.mod plus one `replace` per
# module. Every go command then runs with -modfile=.offline/debian.mod
# -mod=readonly and GOPROXY=off ("${offline_flags[@]}"): it builds with
# go.mod's requirements, so one that is missing fails here as it would with
# network, and nothing third-party enters the repository (.offline/ is
# ignored by git and, being a dot folder, by ./...). The path stays the same
# from run to run, so Go's build cache keeps what it compiled.

# The modules that provide a package this module imports, directly or not:
# go.mod requires each of them (the last four // indirect).
debian_modules=(
  google.golang.org/grpc
  google.golang.org/protobuf
  google.golang.org/genproto
  github.com/golang/protobuf
  golang.org/x/net
  golang.org/x/sys
  golang.org/x/text
)
debian_hint="apt-get install golang-go golang-google-grpc-dev golang-github-golang-protobuf-1-5-dev"

# offline_setup: checks the packages, writes .offline/ (see above), sets
# offline_dir, offline_flags (for go build, vet, test) and offline_replaces
# (the replace lines, for a project of a user's that uses this module), and
# exports the environment every go command here runs in.
offline_setup() {
  command -v go >/dev/null || { echo "FAIL: go client: go not found: $debian_hint" >&2; return 1; }
  offline_dir="$PWD/.offline"
  rm -rf "$offline_dir"
  mkdir -p "$offline_dir"
  offline_replaces=""
  local m src dst entry gover
  for m in "${debian_modules[@]}"; do
    src="/usr/share/gocode/src/$m"
    [ -f "$src/go.mod" ] || { echo "FAIL: go client: $src/go.mod missing: $debian_hint" >&2; return 1; }
    dst="$offline_dir/$m"
    mkdir -p "$dst"
    for entry in "$src"/*; do
      case "${entry##*/}" in go.mod | go.sum) ;; *) ln -s "$entry" "$dst/" ;; esac
    done
    # Keep the module's language version (its `go` line); drop its requirements.
    gover=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$src/go.mod")
    printf 'module %s\n\ngo %s\n' "$m" "${gover:-1.11}" >"$dst/go.mod"
    offline_replaces+="replace $m => $dst"$'\n'
  done
  { cat go.mod; echo; printf '%s' "$offline_replaces"; } >"$offline_dir/debian.mod"
  offline_flags=(-modfile="$offline_dir/debian.mod" -mod=readonly)

  export GO111MODULE=on GOPROXY=off GOFLAGS= GOWORK=off
  # Go's build cache lives under $HOME; without one (some CI shells) keep it here.
  if [ -z "${GOCACHE:-}" ] && [ -z "${HOME:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ]; then
    export GOCACHE="$offline_dir/cache"
  fi
}
