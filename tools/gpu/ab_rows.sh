# Sourced by a queued A/B job's run.sh after tools/gpu/queue_env.sh (see tools/gpu/queue.sh): the
# step rows of docs/PERF.md's A/B tables, one process a setting, so that a job is a loop of calls:
#   source tools/gpu/queue_env.sh; source tools/gpu/ab_rows.sh
#   for r in 1 2 3; do ab_step base base_moe_gpu_check qwen3-30b-a3b
#                      ab_step new new_moe_gpu_check qwen3-30b-a3b PEREGRINE_X=1; done
# tools/gpu/ab_summary.py LOG groups the rows (median, spread, difference from base).
# Each prints "ROW <label> <us a step> <floor/t>" (ab_step: batch 1, the graph captured at
# AB_CONTEXT keys, default 1024) or "SERVE <label> <context> <us> <floor/t>" (ab_serve: the
# engine's graph sets up to 32K, contexts AB_SERVE_CONTEXTS). Binaries from $BIN; a row that does
# not come back in AB_TIMEOUT seconds (default 60) prints nothing. AB_ARGS: more bench arguments
# for both (e.g. "--weight-dtype fp8"; split on spaces). (Names prefixed ab_: a job's
# function named like a command its pipeline calls — `tr` — recursed until the job's timeout,
# docs/PERF.md "Session 22".)
ab_step() {  # label binary model [VAR=value ...]
  local label=$1 bin=$2 model=$3 ctx=${AB_CONTEXT:-1024}; shift 3
  env "$@" timeout "${AB_TIMEOUT:-60}" "$BIN/$bin" bench gpu-decode --load-format dummy --iters 50 \
    --batch 1 --context "$ctx" --model "configs/$model/config.json" ${AB_ARGS:-} 2>&1 |
    command tr '\r' '\n' | command grep -E "^ +1 +$ctx " | command head -1 |
    command awk -v l="$label" '{print "ROW", l, $3, $7}'
}
ab_ctx_pairs() {  # rounds "contexts" model label_a label_b [VAR=value ...]: per round and context
  # (graph captured there), a row of moe_gpu_check's defaults (label_a-c<ctx>), then one with the
  # settings (label_b-c<ctx>); a warm-up row first
  local rounds=$1 ctxs=$2 model=$3 la=$4 lb=$5 r c; shift 5
  ab_step warmup moe_gpu_check "$model"
  for ((r = 1; r <= rounds; ++r)); do
    for c in $ctxs; do
      AB_CONTEXT=$c ab_step "$la-c$c" moe_gpu_check "$model"
      AB_CONTEXT=$c ab_step "$lb-c$c" moe_gpu_check "$model" "$@"
    done
  done
}
ab_sweep() {  # rounds "model ..." "label VAR=value" ...: one-knob sweep of moe_gpu_check, each
  # round and model a base row, then one row a setting (interleaved: the settings of a round
  # run between its bases)
  local rounds=$1 models=$2 r m s; shift 2
  for ((r = 1; r <= rounds; ++r)); do
    for m in $models; do
      ab_step "base-$m" moe_gpu_check "$m"
      for s in "$@"; do
        ab_step "${s%% *}-$m" moe_gpu_check "$m" "${s#* }"
      done
    done
  done
}
ab_serve() {  # label binary model [VAR=value ...]
  local label=$1 bin=$2 model=$3 ctxs=${AB_SERVE_CONTEXTS:-1024,2048,4096}; shift 3
  env "$@" timeout "${AB_TIMEOUT:-90}" "$BIN/$bin" bench gpu-decode --load-format dummy --iters 30 \
    --batch 1 --context "$ctxs" --capture-context 32768 --model "configs/$model/config.json" \
    ${AB_ARGS:-} 2>&1 |
    command tr '\r' '\n' | command grep -E "^ +1 +(${ctxs//,/|}) " | command sort -u |
    command awk -v l="$label" '{print "SERVE", l, $2, $3, $7}'
}
ab_tests() {  # binary gtest-filter [VAR=value ...]: the run's verdict lines (passes, failures)
  local bin=$1 filter=$2; shift 2
  env "$@" timeout "${AB_TEST_TIMEOUT:-240}" "$BIN/$bin" --gtest_filter="$filter" 2>&1 |
    command grep -E '^\[ +(OK|FAILED|PASSED) |Failure|Expected|Which is|differs|max_rel|nmse' |
    command tail -40
}
ab_fused_tests() {  # [gtest-filter [VAR=value ...]]: the fused decode attention's tests
  # (fattn_gpu_check; default filter RopeKvWriteAttention.*), their verdict and failure lines
  local filter=${1:-'RopeKvWriteAttention.*'}; shift $(( $# > 0 ? 1 : 0 ))
  ab_tests fattn_gpu_check "$filter" "$@" |
    command grep -E 'Failure|Expected|Which is|PASSED|FAILED|differs|registers' | command head -20
}
ab_trace() {  # label binary model [VAR=value ...]: block timeline of one batch-1 step (a binary of
  # the -DPEREGRINE_BLOCK_TRACE=ON build; tools/gpu/block_timeline.py): per kernel kind, the
  # first AB_TRACE_PHASES (60) lines of the phases, with AB_TRACE_LAUNCHES=1 also two middle
  # layers' launches; the trace itself is gzipped under $OUT/tr/<label>.
  local label=$1 bin=$2 model=$3 ctx=${AB_CONTEXT:-1024}; shift 3
  local dir="$OUT/tr/$label"
  env "$@" PEREGRINE_BLOCK_TRACE_OUT="$dir" timeout 90 "$BIN/$bin" bench gpu-decode \
    --load-format dummy --iters 20 --batch 1 --context "$ctx" --model "configs/$model/config.json" 2>&1 |
    command tr '\r' '\n' | command grep -E "^ +1 +$ctx "
  local f="$dir/trace_b1_c$ctx.csv"
  [[ -f "$f" ]] || { echo "no trace for $label"; return; }
  echo "== $label: per kernel kind"; python3 tools/gpu/block_timeline.py "$f"
  if [[ -n "${AB_TRACE_LAUNCHES:-}" ]]; then
    echo "== $label: launches of two middle layers"
    python3 tools/gpu/block_timeline.py "$f" --launches | command sed -n '2,3p;150,166p'
  fi
  echo "== $label: phases"; python3 tools/gpu/block_timeline.py "$f" --phases | command head -"${AB_TRACE_PHASES:-60}"
  command gzip -f "$f"
}
ab_header() {  # the job's first lines: the binaries' commit and the card
  echo "binaries of: $(cat "$JOB/commit" 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
}
ab_hbm() {  # the bench's own D2D line (the floor's rate) on Qwen3-30B-A3B's step
  "$BIN/moe_gpu_check" bench gpu-decode --load-format dummy --iters 5 --batch 1 --context 1024 \
    --model configs/qwen3-30b-a3b/config.json 2>&1 | command tr '\r' '\n' | command grep -E '^HBM' |
    command head -1
}
ab_headline_b1() {  # issue 7's batch-1 rows (moe_gpu_check): Qwen3-30B-A3B and DeepSeek-V2-Lite
  # at 1 x 1K, three interleaved rounds
  local r
  for r in 1 2 3; do
    ab_step base-qwen3-30b-a3b moe_gpu_check qwen3-30b-a3b
    ab_step base-deepseek-v2-lite moe_gpu_check deepseek-v2-lite
  done
}
ab_headline_moe() {  # the headline's MoE rows after batch 1 (moe_gpu_check only): batches 8 / 32
  # of Qwen3-30B-A3B and DeepSeek-V2-Lite, Moonlight at 1
  ab_batches base qwen3-30b-a3b 8,32
  ab_batches base deepseek-v2-lite 8,32
  ab_batches base moonlight-16b-a3b 1
}
ab_headline_rest() {  # the headline's rows after batch 1: ab_headline_moe, then Llama-3.1-8B at 1
  # (control, gemv_gpu_check)
  ab_headline_moe
  AB_BIN=gemv_gpu_check ab_batches base llama-3.1-8b 1
}
ab_batches() {  # label model batches [VAR=value ...]: "ROW b<N><label>-<model> us floor/t" per
  # batch (comma-separated, graph captured at 1024 keys); model dsv3_5l: DeepSeek-V3's config cut
  # to 5 layers (tools/gpu/dsv3_5l.sh)
  local label=$1 model=$2 batches=$3; shift 3
  local cfg="configs/$model/config.json"
  if [[ "$model" == dsv3_5l ]]; then cfg=$(tools/gpu/dsv3_5l.sh); fi
  env "$@" timeout 90 "$BIN/${AB_BIN:-moe_gpu_check}" bench gpu-decode --load-format dummy --iters 30 \
    --batch "$batches" --context 1024 --model "$cfg" 2>&1 | command tr '\r' '\n' |
    command grep -E '^ +[0-9]+ +1024 ' | command sort -u |
    command awk -v l="$label" -v m="$model" '{print "ROW b" $1 l "-" m, $3, $7}'
}
