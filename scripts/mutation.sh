#!/usr/bin/env bash
# Mutation testing of one module with mutmut 3: which small changes to it does the suite miss?
#
#   scripts/mutation.sh MODULE [REV]
#
# MODULE is a path under src/tether without `.py`: model/graph, engine/executor,
# engine/writer, store/judgement, store/memory, store/sqlite/leases, store/postgres/log,
# store/postgres/leases, server/auth, ...
# REV (default: the work tree as it is) is a git revision to measure instead, e.g. to get
# the score before a change. The run happens in a scratch copy (TETHER_MUTATION_DIR,
# default /tmp/tether-mutation/MODULE[-REV]) so it never touches the work tree, and only
# the tests that exercise the module run (the map below; TESTS="..." overrides it).
# It needs PostgreSQL like the suite does, and `pip install 'mutmut>=3'` (the dev extra).
# The last lines print the score: killed / (killed + survived + no tests + timeouts).
# Inspect a survivor afterwards with `cd DIR && mutmut show NAME`.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
module="${1:?usage: scripts/mutation.sh MODULE [REV]  (e.g. model/graph, store/judgement, server/auth)}"
rev="${2:-}"
src="src/tether/${module}.py"

default_tests() {
  case "$1" in
    model/graph | model/records | engine/writer | engine/executor | engine/context)
      echo "tests/test_executor.py tests/test_budgets.py tests/test_subagents.py" \
        "tests/test_records.py tests/test_writer.py tests/test_cancel.py" \
        "tests/test_graph.py tests/test_graph_replay.py tests/test_waits_concurrent.py" ;;
    store/judgement | store/memory* | store/sqlite* | store/postgres*)
      echo "tests/store tests/test_writer.py" ;;
    server/auth | server/session)
      # Every test file that sends a token, a page cookie or none to a real server.
      echo "tests/server/test_api.py tests/server/test_page_session_scope.py" \
        "tests/server/test_hardening.py tests/server/test_hostile_output.py" \
        "tests/server/test_console_signin.py tests/server/test_page_security.py" ;;
    *) echo "tests --ignore=tests/faults" ;;
  esac
}
tests="${TESTS:-$(default_tests "$module")}"
# The runtime's logic is the same on every backend: its tests run on the in-memory store
# only, a third of the time per mutant (KEEP="" runs every backend).
case "$module" in
  model/graph | model/records | engine/writer | engine/executor | engine/context)
    keep="${KEEP-not sqlite and not postgres}" ;;
  *) keep="${KEEP-}" ;;
esac

# What the tests read besides src and tests (the .proto, docs they check, examples).
copied="src tests bench pyproject.toml proto scripts docs examples README.md CHANGELOG.md"
name="${module//\//_}${rev:+-$rev}"
dir="${TETHER_MUTATION_DIR:-/tmp/tether-mutation/$name}"
rm -rf "$dir"
mkdir -p "$dir"
if [[ -n "$rev" ]]; then
  git -C "$here" archive "$rev" $copied | tar -x -C "$dir"
else
  (cd "$here" && cp -r $copied "$dir/")
fi
[[ -f "$dir/$src" ]] || { echo "no module $src in ${rev:-the work tree}" >&2; exit 2; }

# Only tests that exist at REV (an older revision may lack some of the map's files).
selected=()
for t in $tests; do
  if [[ "$t" == --* || -e "$dir/$t" ]]; then selected+=("$t"); fi
done

python3 - "$dir/pyproject.toml" "$src" "$keep" "${selected[@]}" <<'EOF'
import json, sys
path, module, keep, *tests = sys.argv[1:]
args = ["-p", "no:cacheprovider", "-q", "--timeout", "120"] + (["-k", keep] if keep else [])
# Tests that read the source as text fail on mutmut's rewritten copy, mutant or not.
args += ["--deselect", "tests/test_writer.py::test_records_are_built_in_the_record_module_only"]
with open(path, "a") as f:
    f.write(
        "\n[tool.mutmut]\n"
        'source_paths = ["src/tether"]\n'
        'also_copy = ["bench", "proto", "scripts", "docs", "examples", "README.md", "CHANGELOG.md"]\n'
        f"only_mutate = [{json.dumps(module)}]\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        f"pytest_add_cli_args = {json.dumps(args)}\n"
        # A mutant that hangs is a timeout after 3x its tests' clean time (+10 s), not 15x.
        "timeout_multiplier = 3.0\n"
        "timeout_constant = 10.0\n"
    )
EOF

cd "$dir"
# mutmut imports the mutated copy (mutants/src) and takes src off its own path; processes
# the tests start (`tether serve`, workers) run the unmutated copy, since the mutants'
# trampolines work in mutmut's process only. So a mutant only a subprocess would run
# counts as "no tests": it is not claimed as killed.
export PYTHONPATH="$dir/src"
echo "mutating $src with: ${selected[*]}  (in $dir)"
mutmut run --max-children "${MUTATION_CHILDREN:-2}" >"$dir/run.log" 2>&1 || {
  tail -30 "$dir/run.log"; exit 1
}
mutmut results --all true >"$dir/results.txt" 2>&1 || true
python3 - "$dir" "$module" "${rev:-work tree}" <<'EOF'
import collections, re, sys
d, module, rev = sys.argv[1:]
counts = collections.Counter()
for line in open(f"{d}/results.txt"):
    m = re.match(r"\s*(\S+): (.+)$", line)
    if m:
        counts[m.group(2).strip()] += 1
killed = counts.get("killed", 0)
total = sum(n for s, n in counts.items() if s not in ("skipped", "not checked"))
score = 100 * killed / total if total else 0.0
print(f"{module} ({rev}): {dict(counts)}")
print(f"mutation score {module} ({rev}): {killed}/{total} killed = {score:.1f}%")
EOF
