"""The softmax bandit: 10 actions, logits θ, π = softmax(θ), a peaked reward, π_ref uniform.

One step of RLOO on it is one prompt with K sampled "completions", each a single action, so everything the trainer
does to a sequence happens here to one token:

- the reward r(a) is ``REWARDS[a]``: 1 for action 0, 0.8 for two near misses, less for the rest, so a policy can
  first pile onto the near misses and the estimators' paths part ways;
- the KL-shaped reward is s(a) = r(a) − β·(log π(a) − log π_ref(a)). That is TRL 1.x ``RLOOTrainer``'s form:
  ``rewards - beta * kl`` with kl the sum over the completion's tokens of ``old_logps - ref_logps`` (the k1
  estimator), subtracted *before* the baseline, with no gradient through it. Here the completion is one token, so
  the sum is the one term. Every estimator below is handed these shaped rewards, as this app's ``reinforce``
  trainer (the RLOO trainer with its advantages swapped) is; TRL's ``GRPOTrainer`` puts its KL in the loss instead.
- the score function of a softmax: ∇θ log π(a) = e_a − π.

Why the shaped reward is the right one: the objective J_β(θ) = E_π[r] − β·KL(π‖π_ref) has the gradient
E_π[s(a) ∇ log π(a)] − β·E_π[∇ log π(a)], and the last term is 0, so an unbiased estimator handed s is unbiased for
∇J_β. Its maximiser is π*_β ∝ π_ref·exp(r/β), and J_β(π*) − J_β(π) = β·KL(π‖π*_β): the KL to the optimum is the
regret, which is why the table reports it. At π*_β every shaped reward is the same number (β·log Z), so every
estimator's advantages vanish there: it is a fixed point of all of them.
"""

from __future__ import annotations

import numpy as np

ACTIONS = 10
# r(a): one best action, two near misses (0.8), then a slope down to 0. Why this shape: with one best action and the
# rest equal the estimators' paths differ by a rescaling; near misses make GRPO's std normalisation visible.
REWARDS = np.array([1.0, 0.8, 0.8, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0])
REF_LOGITS = np.zeros(ACTIONS)  # π_ref uniform


def log_softmax(theta: np.ndarray) -> np.ndarray:
    """log π over the last axis, shifted by the maximum so that large logits do not overflow."""
    shifted = theta - theta.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def softmax(theta: np.ndarray) -> np.ndarray:
    return np.exp(log_softmax(theta))


def shaped_rewards(theta: np.ndarray, beta: float) -> np.ndarray:
    """s(a) = r(a) − β·(log π(a) − log π_ref(a)) for every action (over the last axis; θ may carry a batch axis)."""
    if not beta:
        return np.broadcast_to(REWARDS, np.shape(theta)).copy()
    return REWARDS - beta * (log_softmax(theta) - log_softmax(REF_LOGITS))


def expected_reward(theta: np.ndarray) -> np.ndarray:
    """E_π[r], the figure's y axis: the task's reward, without the KL term."""
    return softmax(theta) @ REWARDS


def kl(p_logits: np.ndarray, q_logits: np.ndarray) -> np.ndarray:
    """KL(p‖q) in nats for two policies given by their logits (over the last axis)."""
    log_p, log_q = log_softmax(p_logits), log_softmax(q_logits)
    return (np.exp(log_p) * (log_p - log_q)).sum(axis=-1)


def objective(theta: np.ndarray, beta: float) -> np.ndarray:
    """J_β(θ) = E_π[r] − β·KL(π‖π_ref): what the expected RLOO update climbs."""
    return expected_reward(theta) - beta * kl(theta, REF_LOGITS)


def optimum_logits(beta: float) -> np.ndarray:
    """Logits of π*_β ∝ π_ref·exp(r/β), the maximiser of J_β (β > 0; at β = 0 the optimum is the best action
    alone, which no finite logits reach)."""
    if not beta > 0:
        raise ValueError("the KL-regularised optimum needs beta > 0")
    return REF_LOGITS + REWARDS / beta


def policy_gradient(theta: np.ndarray, beta: float) -> np.ndarray:
    """∇θ J_β in closed form: ∂J/∂θ_j = π_j·(s_j − E_π[s]), the softmax's Jacobian applied to the shaped reward
    (the −β·E[∇ log π] term is 0)."""
    pi, s = softmax(theta), shaped_rewards(theta, beta)
    return pi * (s - (pi * s).sum(axis=-1, keepdims=True))
