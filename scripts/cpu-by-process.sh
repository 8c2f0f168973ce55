#!/usr/bin/env bash
# cpu-by-process.sh runs a command and prints the CPU time (user + system)
# that it and every process it started spent, summed by process name
# (devstored, postgres, stock, redis-server, ...). Linux only: it samples
# /proc every 200 ms, so a process that lives shorter than that is missed;
# with gawk (mawk stops at a process that exits while it reads).
#
#   scripts/cpu-by-process.sh go run ./loadtest --strategies atomic ...
#
# The command's output goes to stderr.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 command [args...]" >&2; exit 2; }
hz=$(getconf CLK_TCK)
seen=$(mktemp)
trap 'rm -f "$seen"' EXIT
"$@" >&2 &
root=$!
while kill -0 "$root" 2>/dev/null; do
	# pid ppid name cpu-ticks of every process, then keep root's descendants.
	awk -v root="$root" '
			NF {
				o = index($0, "("); c = 0
				for (i = length($0); i > 0; i--) if (substr($0, i, 1) == ")") { c = i; break }
				name = substr($0, o + 1, c - o - 1)
				split(substr($0, c + 2), f, " ")
				pid = $1 + 0; ppid[pid] = f[2] + 0; nm[pid] = name; cpu[pid] = f[12] + f[13]
			}
			END {
				for (p in nm) { q = p; while (q != root && q in ppid && q > 1) q = ppid[q]; if (q == root) print p, nm[p], cpu[p] }
			}' /proc/[0-9]*/stat 2>/dev/null >>"$seen" || true
	sleep 0.2
done
wait "$root" || status=$?
# The last sample of each pid, summed by name.
awk -v hz="$hz" '{ last[$1] = $3; name[$1] = $2 }
	END { for (p in last) sum[name[p]] += last[p]; for (n in sum) { printf "%-16s %8.2fs\n", n, sum[n] / hz; t += sum[n] } printf "%-16s %8.2fs\n", "all", t / hz }' "$seen" | sort -k2 -rn
exit "${status:-0}"
