#!/bin/bash
# Usage: deploy/slurm/submit.sh EXPERIMENT RESULTS_DIR SHARDS
# Queues SHARDS array tasks of sweep.sbatch and the merge after them.
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 EXPERIMENT RESULTS_DIR SHARDS" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
export EXPERIMENT=$1 RESULTS=$2 SHARDS=$3
jid=$(sbatch --parsable --export=ALL --array=0-$((SHARDS - 1)) "$here/sweep.sbatch")
sbatch --export=ALL --dependency=afterany:"${jid%%;*}" "$here/merge.sbatch"
