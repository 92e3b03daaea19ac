"""How data moves: device placement, mesh routing and link parameters."""

from palm.network.loads import Profile, mesh_profile, profile
from palm.network.placement import Placement, make_placement

__all__ = ["Placement", "Profile", "make_placement", "mesh_profile", "profile"]
