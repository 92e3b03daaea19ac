"""What is simulated, part 2: the machine."""

from palm.hardware.presets import HARDWARE_PRESETS, hardware_preset
from palm.hardware.spec import GpuClusterHardware, Hardware, Mesh2DHardware, PeakTflops

__all__ = [
    "HARDWARE_PRESETS",
    "GpuClusterHardware",
    "Hardware",
    "Mesh2DHardware",
    "PeakTflops",
    "hardware_preset",
]
