"""Live tuning, as a breaker follows it: the settings the fleet's record carries now.

An operator tunes a running fleet (``fleetbreaker tune``): the settings travel with the
record (``Record.tuned``), and each container adopts them with the store answer that brings
them, within ``cache_ttl``. :class:`LiveTuning` tells the breaker when they changed and what
they are; the breaker applies them (a policy for the rules, a counting strategy, shadow or
enforce), so the hot path reads plain attributes set once per change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetbreaker.policy import Policy

if TYPE_CHECKING:
    from fleetbreaker.config import BreakerConfig


class LiveTuning:
    """A breaker's settings: as deployed, and as the fleet's record tunes them now."""

    def __init__(self, deployed: BreakerConfig, name: str) -> None:
        self.name = name
        self.deployed = deployed
        self.config = deployed
        self.policy = Policy.from_config(deployed)
        # The two as one value, read at once (policy_for).
        self._followed = (deployed, self.policy)
        self.text = ""

    def follow(self, text: str) -> BreakerConfig | None:
        """The settings ``text`` gives (the deployed ones, tuned), or None when the text is
        the one already followed."""
        if text == self.text:
            return None
        # Tuning is rare: its module (json, the checks) loads with the first tuned record.
        from fleetbreaker.tuning import retuned

        config = retuned(self.deployed, text, self.name)
        # Policy before text: a thread that sees the new text must also see its policy.
        self.config = config
        self.policy = policy = Policy.from_config(config)
        self._followed = (config, policy)
        self.text = text
        return config

    def policy_for(self, config: BreakerConfig) -> Policy:
        """The policy of ``config``: the one built when it was followed, when it is the
        config followed now (a breaker's construction, a tune), else built for it."""
        followed, policy = self._followed
        return policy if followed is config else Policy.from_config(config)
