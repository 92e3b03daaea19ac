"""How data moves: device placement, mesh routing and link parameters."""

from palm.network.links import PathCost, path_cost, ring_cost
from palm.network.placement import Placement, make_placement

__all__ = ["PathCost", "Placement", "make_placement", "path_cost", "ring_cost"]
