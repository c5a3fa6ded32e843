"""The figures' palette and part labels, in one place: named colours for the roles they play, the
palettes (timeline event groups, graph categories and phases, critical-path kinds, the step's
parts) and the label tables (time-breakdown parts, critical-path kinds, metrics, what-if
categories). Figure modules import from here, never spell a colour or a part's label themselves.
"""

from __future__ import annotations

# Colours, named for the roles they play (several roles share one colour).
ACCENT = "#7c5cff"  # compute, CPU ops; bars of one measure; the first side of a comparison
KERNEL = "#f72585"  # GPU kernels and a GPU stream's busy time; the backward phase
HIGHLIGHT = "#ffd166"  # flow arrows, the graph's selection ring; the second side of a comparison; CUDA runtime
COMMUNICATION = "#ff6b6b"  # communication (collectives)
MUTED = "#adb5bd"  # idle time, "other"
ALERT = "#e63946"  # the critical path's outline and hand-offs, search hits
HOST = "#f4a261"  # launch / host overhead, allocations
TEAL = "#2a9d8f"  # sync waits, autograd, a selection's consumers
SAND = "#e9c46a"  # host time the trace did not record, custom ops
SLATE = "#8d99ae"  # annotations, views
SKY = "#4cc9f0"  # Python events, the forward phase
MINT = "#06d6a0"  # memory events
LIME = "#b5e48c"  # the optimizer phase
BLUE = "#4895ef"  # a selection's producers
GOLD = "#ffb703"  # the hierarchy's selection ring
LIGHT_GREY = "#bbbbbb"  # the annotation category
MIXED = "#cccccc"  # a group of ops of mixed category or phase
UNKNOWN = "#999999"  # a value its palette has no colour for
GPU_IDLE = "#555"  # the idle part of a GPU stream's busy/idle bar
OUTLINE = "#222"  # node outlines (graph, hierarchy)
SEARCH_OUTLINE = "#111"  # the outline of a timeline bar the search matches
BAR_TEXT = "#fff"  # names drawn inside timeline bars
TRANSPARENT = "rgba(0,0,0,0)"  # ring markers: outline only
DEP_EDGE = "rgba(150,150,170,0.45)"  # the operator graph's data-dependency lines
HIER_EDGE = "rgba(120,120,150,{})"  # the hierarchy's edges: .format(alpha)
AGGREGATE = "rgba(140,140,150,0.45)"  # the timeline's grey bars of grouped short events
FLOW_LINE = "rgba(255,170,0,0.55)"  # the timeline's lines from a kernel back to its launch
SUITE = "gold"  # the fleet suite's picks (stars)
SUITE_OUTLINE = "black"  # their outline
SCALE = "Viridis"  # the continuous colour scale (graph by time, rank x step heat maps)

# The timeline's event groups (engine.figures.timeline `_group`), shared with its lanes.
GROUP_COLORS = {
    "cpu_op": ACCENT,
    "kernel": KERNEL,
    "runtime": HIGHLIGHT,
    "memory": MINT,
    "annotation": SLATE,
    "python": SKY,
    "other": MUTED,
}

# The operator graph's and hierarchy's nodes by op category (engine.trace.categories).
CATEGORY_COLORS = {
    "compute": ACCENT,
    "communication": COMMUNICATION,
    "view": SLATE,
    "allocation": HOST,
    "autograd": TEAL,
    "annotation": LIGHT_GREY,
    "custom": SAND,
    "mixed": MIXED,
}

# The operator graph's and hierarchy's nodes by training phase.
PHASE_COLORS = {
    "forward": SKY,
    "backward": KERNEL,
    "optimizer": LIME,
    "other": MUTED,
    "mixed": MIXED,
}

# The critical path's pieces by kind (engine.simulate.critical_path), in legend order.
KIND_COLORS = {
    "compute": ACCENT,
    "communication": COMMUNICATION,
    "launch_host": HOST,
    "sync_wait": TEAL,
    "host_unrecorded": SAND,
    "idle": MUTED,
}

# The critical path's kinds as the legend and tables name them.
KIND_LABELS = {
    "compute": "compute",
    "communication": "communication",
    "launch_host": "launch / host overhead",
    "sync_wait": "sync wait",
    "host_unrecorded": "host (unrecorded)",
    "idle": "idle",
}

# The stacked parts of a step (they add up to it: engine.analysis.breakdown.ADDITIVE) in bars.
BREAKDOWN_COLORS = {
    "compute_ms": ACCENT,
    "exposed_communication_ms": COMMUNICATION,
    "idle_ms": MUTED,
}

# A TimeBreakdown's parts (ms per step) as the figures and tables name them.
PART_LABELS = {
    "step_ms": "step",
    "compute_ms": "compute",
    "communication_ms": "communication",
    "exposed_communication_ms": "exposed communication",
    "idle_ms": "idle",
}

# The per-rank breakdown bars' legend (engine.figures.analysis): communication not hidden by compute.
RANK_BREAKDOWN_LABELS = {**PART_LABELS, "exposed_communication_ms": "communication (not overlapped)"}

# The replay's per-rank table columns and bars (engine.figures.ranks): (key, label).
PARTS = tuple((k, PART_LABELS[k]) for k in ("compute_ms", "communication_ms", "exposed_communication_ms", "idle_ms"))

# The rank overview's heat-map panels, then its stacked bars without the step (engine.figures.overview).
PANELS = tuple((k, PART_LABELS[k]) for k in ("step_ms", "compute_ms", "exposed_communication_ms", "idle_ms"))

# Sampled metrics as the comparison's metric curves title their panels.
METRIC_LABELS = {
    "cpu_util_pct": "process CPU util (%)",
    "sys_cpu_util_pct": "system CPU util (%)",
    "rss_mb": "RSS (MB)",
    "gpu_sm_util_pct": "GPU SM util (%)",
    "gpu_mem_mb": "GPU memory (MB)",
    "gpu_power_w": "GPU power (W)",
    "gpu_clock_mhz": "GPU SM clock (MHz)",
}

# Sampled metrics as the panels under a timeline name them (short: a legend entry and a y title).
METRIC_SHORT_LABELS = {
    "cpu_util_pct": "CPU %",
    "sys_cpu_util_pct": "machine CPU %",
    "rss_mb": "RSS MB",
    "gpu_util_pct": "GPU util %",
}

# The what-if sensitivity categories (engine/simulate/sensitivity.py) as its table names them.
SENSITIVITY_LABELS = {
    "gpu": "GPU (all GPU work)",
    "cpu": "CPU (host work)",
    "communication": "communication",
    "gemm": "GEMM",
    "memory_bound": "memory-bound kernels",
    "attention": "attention",
}
