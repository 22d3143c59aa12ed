"""The U-statistic tools: the variance of the GRPO gradient and the group size that minimises it.

- analysis.py: the estimators (c1, c2, c3 from rewards and scores) and the toy bandit that checks them
- sketch.py: score sketches read from the learner's own backward
- monitor.py: the online monitor during training (estimates, group_size auto)
- advisor.py: the offline group-size advisor (`grpo-train advise-group-size`)
"""
