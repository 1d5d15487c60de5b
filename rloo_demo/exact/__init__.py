"""An exact learning trajectory: a softmax bandit on which every estimator's expected update, its covariance and the
path the expected updates take are computed exactly, by enumeration, beside sampled runs.

- ``bandit``: the bandit itself (10 actions, a peaked reward, π_ref uniform, the KL-shaped reward and its optimum);
- ``moments``: one step's exact E[ĝ] and Cov[ĝ] per estimator, summed over every multiset of K actions;
- ``paths``: the expected-update path and sampled trajectories from the same start;
- ``report``: the Markdown table and the figure;
- ``command``: ``python -m rloo_demo trajectory``.

numpy only, no torch: it runs anywhere, in about a second.
"""
