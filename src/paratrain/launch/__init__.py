"""`paratrain run`: build the launch for a method, run it, turn failures into one readable error."""

from paratrain.launch.config import RunConfig, load_config
from paratrain.launch.plan import LaunchPlan, build_plan, execute

__all__ = ["LaunchPlan", "RunConfig", "build_plan", "execute", "load_config"]
