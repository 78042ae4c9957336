"""The training log on rank 0, on the core's IterationLog: banner, a row every ``log_every`` steps, footer."""
from ..core.log import IterationLog

COLUMNS = (("step", "8d"), ("epoch", "6d"), ("loss", "14.6e"), ("accuracy", "9.4f"), ("MB sent", "9.3f"),
           ("comm ms", "9.3f"), ("hidden", "7.1%"), ("time(s)", "9.3f"))
STAGE_NAMES = {0: "replicated (DDP)", 1: "ZeRO-1 (optimizer state sharded)",
               2: "ZeRO-2 (optimizer state and gradients sharded)",
               3: "ZeRO-3 (optimizer state, gradients and parameters sharded)"}


def train_log(enabled, stream=None):
    return IterationLog(enabled, COLUMNS, stream=stream)


def banner_lines(info, settings, threads, resumed_at, setup_time):
    buckets = info["buckets"]
    return [
        f"model:     {info['model']}, optimizer {info['optimizer']}",
        f"data:      {info['rows']} rows replicated on {info['ranks']} ranks; global batch {settings.batch_size}, "
        f"{info['steps_per_epoch']} steps per epoch, {settings.epochs} epochs",
        f"sharding:  stage {settings.zero_stage}: {STAGE_NAMES[settings.zero_stage]}",
        f"buckets:   {buckets['count']} of up to {buckets['bucket_bytes']} bytes; overlap "
        f"{'on (background thread)' if info['overlap'] else 'off'}; reducer {info['reducer']}"
        + (f", compressor {info['compressor']}" + (" with error feedback" if info["error_feedback"] else "")
           if info["compressor"] else ""),
        f"threads:   {threads.describe()}",
        f"setup:     {setup_time:.3f} s" + (f"; resumed at step {resumed_at}" if resumed_at else ""),
    ] + [f"note:      {note}" for note in info["notes"]]


def footer_lines(result):
    t, memory = result.timings, result.info["memory"]
    accuracy = "" if result.accuracy is None else f", accuracy {result.accuracy:.4f}"
    lines = [f"status:        {result.status} ({result.info['stop']}) after {result.steps} steps",
             f"training set:  loss {result.loss:.8e}{accuracy}",
             f"time:          {t['train']:.3f} s: compute {t['compute']:.3f} s, optimizer {t['optimizer']:.3f} s, "
             f"communication {t['communication']:.3f} s ({t['hidden']:.3f} s hidden, {t['exposed']:.3f} s exposed)",
             f"memory/rank:   params {memory['params_bytes']} B, gradients {memory['gradients_bytes']} B, "
             f"optimizer state {memory['optimizer_state_bytes']} B, buffers {memory['buffers_bytes']} B (peaks)"]
    return lines
