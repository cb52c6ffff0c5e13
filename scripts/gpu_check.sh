#!/usr/bin/env bash
# The GPU step's measurements in one go (issue 44; about 8 minutes on one H200), from the repository's root:
#
#   bash scripts/gpu_check.sh OUT [CNNDM_JSONL]
#
# 1. the CUDA tests (the decode from CUDA graphs against the eager loop, rewards and decoders staying on the device);
# 2. scripts/bench_rl.py at batch 16 on CUDA (the per-section breakdown of the MLE and mixed steps, the projected
#    CNN/DM epoch; then the 25 costliest CUDA operators of one MLE and one mixed step, with their launch counts), on the
#    first 112 articles of CNNDM_JSONL (default: the shared CNN/DM test file);
# 3. README command 1 under trainer=gpu, timed, with profiler=simple on every run (RESULTS "Where a demo run's time
#    goes" is the CPU's table).
# OUT gets six files: gpu.txt, cuda_tests.txt, bench.txt, demo.txt (the grid's console and Table 4, wall time last),
# and the demo SMS run's fit and test profiles. Each part has its own time limit, so one that hangs leaves the rest.
set -uo pipefail
out="${1:?usage: bash scripts/gpu_check.sh OUT [CNNDM_JSONL]}"
data="${2:-../shared/data/cnndm_see2017_test.jsonl}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export PYTHONUNBUFFERED=1
python=${PYTHON:-python3}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $python -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name())"
  date -u; } > "$out/gpu.txt" 2>&1

timeout 150 $python -m pytest -q -n 0 -p no:cacheprovider -k "cuda or bf16 or pool" tests/test_rl_step.py \
  tests/test_decoding.py tests/test_pointer_generator.py tests/test_mover.py tests/test_rouge.py \
  > "$out/cuda_tests.txt" 2>&1

timeout 180 $python scripts/bench_rl.py --device cuda --steps 5 --warmup 2 --eos-bias 7.6 --rewards rouge_l sms \
  --operators 25 --data "$data" > "$out/bench.txt" 2>&1

sweep="$(mktemp -d)/demo_grid"
start=$(date +%s)
{ timeout 330 $python -m trainer.train -m experiment=demo_grid trainer=gpu profiler=simple \
    reward=mle,rouge_l,wms,sms,s_wms hydra.sweep.dir="$sweep" \
  && $python scripts/table4.py "$sweep"; echo "exit $?; wall $(( $(date +%s) - start )) s"; } > "$out/demo.txt" 2>&1
for stage in fit test; do
  cp "$sweep/seed_0/sms/$stage-profile.txt" "$out/sms_${stage}_profile.txt" 2>/dev/null
done
tail -n 3 "$out"/*.txt
