# Copyright: gpuprov contributors
# Apache-2.0
"""NVIDIA's Xid catalogue as data, and the class (with the admin's action) of each Xid and NVSwitch SXid event.

The one copy of the table: doctor (module_utils/doctor_health.py), bios_check's lost-GPU rule
(module_utils/findings_gpus.py) and the monitoring role's textfile collector (module_utils/gpu_health_metrics.py)
all classify through :func:`classify`. Pure Python 3.8, no Ansible, no I/O.

Source of :data:`XIDS`: the "Analyzing Xid Errors with the Xid Catalog" table of NVIDIA's Xid documentation
(:data:`SOURCE`), for Ampere and newer GPUs: per Xid its mnemonic, the *Resolution Bucket (Immediate Action)*
and the *Resolution Bucket (Investigatory Action)*. Listed are the Xids the catalogue marks as applying to at
least one of A100, H100, B100 or GB200, except 78 (vGPU start, UPDATE_SWFW), 108 (unused), 159 (C2C on Grace
systems, CHECK_UVM) and 162 onwards (no resolution bucket given); an Xid not listed classifies as ``unknown``.
SXids are classified by the severity the NVSwitch driver prints in the event's first line (``Fatal`` /
``Non-fatal``), as NVIDIA's Fabric Manager user guide (:data:`SXID_SOURCE`) splits them.
"""


from __future__ import annotations

import re

SOURCE = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
SXID_SOURCE = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"

#: class -> (doctor severity, what the admin does). ``{index}`` is the GPU's NVML index where known.
CLASSES = {
    "application": ("info", "restart the application that hit it; the GPU stays usable"),
    "informational": ("info", "nothing to do now; the driver records the event"),
    "reset_gpu": ("fail", "drain the jobs on the GPU, then reset it (nvidia-smi -r -i {index}; on an NVSwitch system "
                          "stop nvidia-fabricmanager first and start it after) or reboot the node"),
    "reboot": ("fail", "drain the node and reboot it; power-cycle it if the GPU does not come back"),
    "contact_support": ("fail", "drain the GPU, run nvidia-bug-report.sh and contact the hardware vendor (RMA)"),
    "reset_fabric": ("fail", "drain the node; stop nvidia-fabricmanager, reset the GPUs (nvidia-smi -r), start "
                             "nvidia-fabricmanager again, or reboot the node"),
    "unknown": ("warn", "look the code up in NVIDIA's Xid catalogue (" + SOURCE + ")"),
}

#: The catalogue's investigatory buckets -> the follow-up when the event comes back.
INVESTIGATE = {
    "CONTACT_SUPPORT": "contact the hardware vendor with nvidia-bug-report.sh output",
    "CHECK_APP/CUDA": "check the application and its CUDA version",
    "WORKFLOW_NVLINK5_ERR": "check the NVLink error counters (nvidia-smi nvlink -e) and contact the vendor",
    "WORKFLOW_XID_13": "run the application under compute-sanitizer or cuda-gdb",
    "WORKFLOW_XID_31": "run the application under compute-sanitizer or cuda-gdb",
    "XID_137_FLOW": "run the application under compute-sanitizer or cuda-gdb (peer-to-peer access)",
    "WORKFLOW_XID_45": "alone: restart nvidia-fabricmanager; with other Xids: follow those",
    "WORKFLOW_XID_48": "check the SRAM uncorrectable-error threshold (nvidia-smi -q -d ECC); run field diagnostics "
                       "and contact the vendor when it is exceeded",
    "INVESTIGATE_SW": "check the driver and firmware versions (update them)",
    "INVESTIGATE_SW_USER": "check the driver version and what the job did with the links",
    "INVESTIGATE_LINK_SI": "check the link (seating, cabling) and contact the vendor",
    "IGNORE": "",
}

#: Xid -> (mnemonic, immediate bucket, investigatory bucket, class), from the catalogue (:data:`SOURCE`).
#: The class follows the immediate bucket: RESTART_APP and WORKFLOW_XID_45 -> application; IGNORE ->
#: informational, except 43, 44 and 137, which the catalogue describes as application faults; RESET_GPU,
#: WORKFLOW_XID_48 and the NVLink workflows -> reset_gpu; RESTART_BM / RESTART_VM -> reboot;
#: CHECK_MECHANICALS -> contact_support. Xid 154 takes its class from the recovery action its line names.
_APP = ("RESTART_APP", "CONTACT_SUPPORT", "application")
XIDS = {
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", *_APP),
    11: ("ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "RESTART_APP", "CHECK_APP/CUDA", "application"),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP", "WORKFLOW_XID_13", "application"),
    14: ("ROBUST_CHANNEL_FAKE_ERROR", "IGNORE", "CONTACT_SUPPORT", "informational"),
    25: ("ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "RESTART_APP", "CHECK_APP/CUDA", "application"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP", "WORKFLOW_XID_31", "application"),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "RESTART_APP", "CHECK_APP/CUDA", "application"),
    37: ("ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "IGNORE", "CHECK_APP/CUDA", "informational"),
    38: ("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "IGNORE", "CONTACT_SUPPORT", "informational"),
    39: ("ROBUST_CHANNEL_CE0_ERROR", *_APP),
    40: ("ROBUST_CHANNEL_CE1_ERROR", *_APP),
    41: ("ROBUST_CHANNEL_CE2_ERROR", *_APP),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE", "CONTACT_SUPPORT", "application"),
    44: ("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "IGNORE", "CONTACT_SUPPORT", "application"),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45", "WORKFLOW_XID_45", "application"),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU", "CONTACT_SUPPORT", "reset_gpu"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", "WORKFLOW_XID_48", "reset_gpu"),
    54: ("SILENT_RUNNING_PWR_REDUCED_CLOCKING", "CHECK_MECHANICALS", "CONTACT_SUPPORT", "contact_support"),
    60: ("ROBUST_CHANNEL_SEC2_ERROR", "RESTART_APP", "INVESTIGATE_SW", "application"),
    62: ("PMU_HALT_ERROR", "RESET_GPU", "CONTACT_SUPPORT", "reset_gpu"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", "IGNORE", "informational"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", "CONTACT_SUPPORT", "reset_gpu"),
    66: ("ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "IGNORE", "INVESTIGATE_SW", "informational"),
    67: ("ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "IGNORE", "CONTACT_SUPPORT", "informational"),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", *_APP),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP", "CHECK_APP/CUDA", "application"),
    70: ("ROBUST_CHANNEL_CE3_ERROR", *_APP),
    71: ("ROBUST_CHANNEL_CE4_ERROR", *_APP),
    72: ("ROBUST_CHANNEL_CE5_ERROR", *_APP),
    74: ("NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT", "reset_gpu"),
    75: ("ROBUST_CHANNEL_CE6_ERROR", *_APP),
    76: ("ROBUST_CHANNEL_CE7_ERROR", *_APP),
    77: ("ROBUST_CHANNEL_CE8_ERROR", *_APP),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "CONTACT_SUPPORT", "reboot"),
    80: ("PBDMA_PUSHBUFFER_CRC_MISMATCH", "RESTART_APP", "CHECK_APP/CUDA", "application"),
    82: ("ROBUST_CHANNEL_NVJPG0_ERROR", *_APP),
    83: ("ROBUST_CHANNEL_NVDEC1_ERROR", *_APP),
    84: ("ROBUST_CHANNEL_NVDEC2_ERROR", *_APP),
    85: ("ROBUST_CHANNEL_CE9_ERROR", *_APP),
    86: ("ROBUST_CHANNEL_OFA0_ERROR", *_APP),
    88: ("ROBUST_CHANNEL_NVDEC3_ERROR", *_APP),
    89: ("ROBUST_CHANNEL_NVDEC4_ERROR", *_APP),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "IGNORE", "CONTACT_SUPPORT", "informational"),
    93: ("INFOROM_ERASE_LIMIT_EXCEEDED", "IGNORE", "CONTACT_SUPPORT", "informational"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", "IGNORE", "application"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", "IGNORE", "reset_gpu"),
    96: ("ROBUST_CHANNEL_NVDEC5_ERROR", *_APP),
    97: ("ROBUST_CHANNEL_NVDEC6_ERROR", *_APP),
    98: ("ROBUST_CHANNEL_NVDEC7_ERROR", *_APP),
    99: ("ROBUST_CHANNEL_NVJPG1_ERROR", *_APP),
    100: ("ROBUST_CHANNEL_NVJPG2_ERROR", *_APP),
    101: ("ROBUST_CHANNEL_NVJPG3_ERROR", *_APP),
    102: ("ROBUST_CHANNEL_NVJPG4_ERROR", *_APP),
    103: ("ROBUST_CHANNEL_NVJPG5_ERROR", *_APP),
    104: ("ROBUST_CHANNEL_NVJPG6_ERROR", *_APP),
    105: ("ROBUST_CHANNEL_NVJPG7_ERROR", *_APP),
    106: ("SMBPBI_TEST_MESSAGE", "IGNORE", "IGNORE", "informational"),
    107: ("SMBPBI_TEST_MESSAGE_SILENT", "IGNORE", "IGNORE", "informational"),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU", "CONTACT_SUPPORT", "reset_gpu"),
    110: ("SEC_FAULT_ERROR", "RESET_GPU", "INVESTIGATE_SW", "reset_gpu"),
    119: ("GSP_RPC_TIMEOUT", "RESET_GPU", "INVESTIGATE_SW", "reset_gpu"),
    120: ("GSP_ERROR", "RESET_GPU", "INVESTIGATE_SW", "reset_gpu"),
    121: ("C2C_ERROR", "IGNORE", "CONTACT_SUPPORT", "informational"),
    126: ("ROBUST_CHANNEL_CE10_ERROR", *_APP),
    127: ("ROBUST_CHANNEL_CE11_ERROR", *_APP),
    128: ("ROBUST_CHANNEL_CE12_ERROR", *_APP),
    129: ("ROBUST_CHANNEL_CE13_ERROR", *_APP),
    130: ("ROBUST_CHANNEL_CE14_ERROR", *_APP),
    131: ("ROBUST_CHANNEL_CE15_ERROR", *_APP),
    132: ("ROBUST_CHANNEL_CE16_ERROR", *_APP),
    133: ("ROBUST_CHANNEL_CE17_ERROR", *_APP),
    134: ("ROBUST_CHANNEL_CE18_ERROR", *_APP),
    135: ("ROBUST_CHANNEL_CE19_ERROR", *_APP),
    136: ("ALI_TRAINING_FAIL", "RESET_GPU", "INVESTIGATE_LINK_SI", "reset_gpu"),
    137: ("NVLINK_PRIV_ERR", "IGNORE", "XID_137_FLOW", "application"),
    139: ("ROBUST_CHANNEL_OFA1_ERROR", *_APP),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU", "CONTACT_SUPPORT", "reset_gpu"),
    141: ("ROBUST_CHANNEL_FAST_PATH_ERROR", "IGNORE", "CONTACT_SUPPORT", "informational"),
    143: ("GPU_INIT_ERROR", "RESET_GPU", "CONTACT_SUPPORT", "reset_gpu"),
    144: ("NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", "reset_gpu"),
    145: ("NVLINK_RLW_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", "reset_gpu"),
    146: ("NVLINK_TLW_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", "reset_gpu"),
    147: ("NVLINK_TREX_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", "reset_gpu"),
    148: ("NVLINK_NVLPW_CTRL_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", "reset_gpu"),
    149: ("NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", "reset_gpu"),
    150: ("NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", "reset_gpu"),
    151: ("ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM", "CONTACT_SUPPORT", "reboot"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "XID_154", "IGNORE", None),
    155: ("NVLINK_SW_DEFINED_ERROR", "RESET_GPU", "INVESTIGATE_SW_USER", "reset_gpu"),
    156: ("RESOURCE_RETIREMENT_EVENT", "RESET_GPU", "IGNORE", "reset_gpu"),
    157: ("RESOURCE_RETIREMENT_FAILURE", "IGNORE", "CONTACT_SUPPORT", "informational"),
    158: ("GPU_FATAL_TIMEOUT", "RESET_GPU", "CONTACT_SUPPORT", "reset_gpu"),
    160: ("CHANNEL_RETIREMENT_EVENT", "IGNORE", "INVESTIGATE_SW", "informational"),
    161: ("CHANNEL_RETIREMENT_FAILURE", "IGNORE", "INVESTIGATE_SW", "informational"),
}

#: Xid 154's recovery actions ("... changed from 0x0 (None) to 0x2 (Node Reboot Required)") -> class. Older
#: drivers print 0x1 as "PF FLR", newer ones as "GPU Reset Required".
RECOVERY_ACTIONS = {
    "none": "informational",
    "gpu reset required": "reset_gpu",
    "pf flr": "reset_gpu",
    "drain p2p": "reset_gpu",
    "drain and reset": "reset_gpu",
    "node reboot required": "reboot",
}

_RECOVERY = re.compile(r"recovery action changed from .*? to 0x[0-9a-fA-F]+ \(([^)]*)\)", re.IGNORECASE)

#: Classes that need the admin (severity fail): what bios_check reports as a hardware Xid.
NEEDS_ADMIN = tuple(name for name, (severity, _action) in CLASSES.items() if severity == "fail")


def classify(code, line=""):
    """Class of Xid ``code`` (an int); Xid 154 reads the recovery action from its kernel-log ``line``."""
    row = XIDS.get(code)
    if row is None:
        return "unknown"
    if row[3] is not None:
        return row[3]
    match = _RECOVERY.search(line or "")
    return RECOVERY_ACTIONS.get(match.group(1).strip().lower(), "unknown") if match else "unknown"


def classify_sxid(fatal):
    """Class of an NVSwitch SXid event: ``reset_fabric`` when the driver calls it Fatal, else informational."""
    return "reset_fabric" if fatal else "informational"


def mnemonic(code):
    """The catalogue's mnemonic of Xid ``code``, or None when it is not in :data:`XIDS`."""
    row = XIDS.get(code)
    return row[0] if row else None


def action(klass, code=None, index=None):
    """The admin's action for an event of class ``klass`` (Xid ``code``, GPU NVML ``index`` when known): the
    class's immediate action, then the catalogue's investigatory action for ``code`` should it come back."""
    text = CLASSES.get(klass, CLASSES["unknown"])[1].replace("{index}", str(index) if index is not None else "N")
    row = XIDS.get(code) if code is not None else None
    follow = INVESTIGATE.get(row[2], "") if row else ""
    return text + ("; if it comes back: " + follow if follow else "")


def severity(klass):
    """Doctor severity (fail | warn | info) of an event class."""
    return CLASSES.get(klass, CLASSES["unknown"])[0]
