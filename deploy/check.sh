#!/bin/bash
# Checks the deployment files without a cluster: shell syntax, the YAML's
# structure, and one end-to-end run of both recipes on this machine (the
# Slurm array's tasks and the Indexed Job's pods run one after another with
# the variables their scheduler would set, then the merge), whose merged
# results must equal one unsharded run of the same sweep.
# Usage: deploy/check.sh [PATH_TO_FLOWLAB]   (default: target/debug/flowlab)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
FLOWLAB=$(realpath "${1:-$root/target/debug/flowlab}")
export FLOWLAB
here=$root/deploy

for f in "$here"/slurm/*.sbatch "$here"/slurm/submit.sh "$here"/check.sh; do
  bash -n "$f"
done

python3 - "$here" <<'PY'
import sys, yaml, pathlib
d = pathlib.Path(sys.argv[1]) / "k8s"
docs = {p.name: yaml.safe_load(p.read_text()) for p in sorted(d.glob("*.yaml"))}
job = docs["sweep-job.yaml"]
assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
spec = job["spec"]
assert spec["completionMode"] == "Indexed"
c = spec["template"]["spec"]["containers"][0]
env = {e["name"]: e["value"] for e in c["env"]}
assert int(env["SHARDS"]) == spec["completions"], "SHARDS must equal completions"
assert "--shard \"$JOB_COMPLETION_INDEX/$SHARDS\"" in c["args"][0]
claim = spec["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
assert docs["results-pvc.yaml"]["metadata"]["name"] == claim
merge = docs["merge-job.yaml"]
assert merge["kind"] == "Job" and "flowlab report" in merge["spec"]["template"]["spec"]["containers"][0]["args"][0]
print("k8s yaml: ok")
PY

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/exp.yaml" <<'YAML'
name: deploy-check
kind: cluster
seed: 3
base:
  model: { dense_params: 100000, compute_s: 0.01 }
  workers: 4
  ps: 2
  steps: 5
sweep:
  workers: [2, 3, 4, 5, 6]
YAML
cd "$work"
"$FLOWLAB" run exp.yaml --out whole --jobs 1 > /dev/null

# Slurm: three array tasks, then the merge.
export EXPERIMENT=$work/exp.yaml RESULTS=$work/slurm SLURM_ARRAY_TASK_COUNT=3
for k in 0 1 2; do
  SLURM_ARRAY_TASK_ID=$k bash "$here/slurm/sweep.sbatch" > /dev/null
done
bash "$here/slurm/merge.sbatch" > /dev/null
unset SLURM_ARRAY_TASK_COUNT

# Kubernetes: the Indexed Job's shell line with a results directory here.
line=$(python3 -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['spec']['template']['spec']['containers'][0]['args'][0])" "$here/k8s/sweep-job.yaml")
line=${line//\/results/$work\/k8s}
line=${line//exec flowlab/exec \"\$FLOWLAB\"}
mkdir -p "$work/k8s"
for k in 0 1; do
  JOB_COMPLETION_INDEX=$k SHARDS=2 EXPERIMENT=$work/exp.yaml sh -c "$line" > /dev/null
done
mline=$(python3 -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['spec']['template']['spec']['containers'][0]['args'][0])" "$here/k8s/merge-job.yaml")
mline=${mline//\/results/$work\/k8s}
mline=${mline//exec flowlab/exec \"\$FLOWLAB\"}
sh -c "$mline" > /dev/null

for merged in slurm/merged k8s/merged; do
  if ! cmp -s <(sort whole/results.csv) <(sort "$merged/results.csv"); then
    echo "$merged/results.csv differs from the unsharded run" >&2
    diff <(sort whole/results.csv) <(sort "$merged/results.csv") >&2 || true
    exit 1
  fi
done
echo "slurm array (3 shards) and indexed job (2 shards): merged results equal the unsharded run"
