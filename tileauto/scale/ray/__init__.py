"""The Ray stages: a builder of Ray tasks and a runner of Ray actors, with node loss handled.

stages.py   RayCluster, RayBuilder, RayRunner
node.py     what a Ray node runs before anything else: its hardware probe
"""
