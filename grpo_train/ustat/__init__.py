"""The U-statistic tools: the variance of the GRPO gradient and the group size that minimises it.

- estimators.py: the three gradient estimators, the MSE law's c1, c2, c3 and their estimates from rewards and scores
- bandit.py: the toy bandit on which the estimators are checked exactly (`python -m grpo_train.ustat.bandit`)
- staleness.py: the MSE at rollout staleness k from the behaviour weights (`python -m grpo_train.ustat.staleness`)
- sketch.py: score sketches read from the learner's own backward
- monitor.py: the online monitor during training (estimates, group_size auto)
- advisor.py: the offline group-size advisor (`grpo-train advise-group-size`)
"""
