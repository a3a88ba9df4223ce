"""The moto server of the deploy rehearsal: moto_atomic_server plus two changes.

- moto's ``LayerVersion`` has no physical id, so a ``Ref`` to a layer in a stack resolves to a
  Python object where CloudFormation returns the version's ARN (the SSM parameters holding the
  layers' ARNs would get garbage). Layer versions get their ARN as physical id, as
  tests/sam/test_rehearsal.py does for moto in-process.
- moto delivers a mapped queue's messages and a mapped table's stream records itself, by
  invoking the function in Docker on every write (slowly failing here, and then consuming the
  messages or dropping the records). The rehearsal runs the functions and delivers their
  events itself, so queues and tables here keep no mappings; the mappings still exist, and
  are read back and toggled, through the Lambda API.
- moto matches every event put on a bus against a schedule rule that has no event pattern
  (AWS never does) and then fails on its Lambda target: PutEvents answers 500. Schedule-only
  rules here receive no put events.
- moto's signature check signs a bodiless GET (such as Lambda's GetEventSourceMapping) as if
  its body were the request's headers, form-encoded, so every such
  call is refused with SignatureDoesNotMatch once IAM is enforced. It is checked here with the
  empty body the client signed.

Usage: python devtools/moto_rehearsal_server.py HOST PORT
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from moto.awslambda.models import LayerVersion
from moto.dynamodb.models.table import Table
from moto.events.models import Rule
from moto.iam.access_control import IAMRequestBase
from moto.sqs.models import Queue

from devtools.moto_atomic_server import main

LayerVersion.physical_resource_id = property(lambda self: self.arn)  # type: ignore[attr-defined]
# A fresh dict on every read: what moto registers there is dropped, so no write invokes.
for _model in (Queue, Table):
    _model.lambda_event_source_mappings = property(  # type: ignore[assignment]
        lambda self: {}, lambda self, value: None
    )

_send_to_targets = Rule.send_to_targets


def _send_to_pattern_targets(self: Rule, *args: Any, **kwargs: Any) -> None:
    if self.scheduled_expression and not self.event_pattern.get_pattern():
        return  # a schedule, not a pattern: PutEvents does not reach it
    _send_to_targets(self, *args, **kwargs)


Rule.send_to_targets = _send_to_pattern_targets  # type: ignore[method-assign]

_create_aws_request = IAMRequestBase._create_aws_request


def _create_signed_request(self: IAMRequestBase) -> Any:
    if self._method in ("GET", "HEAD", "DELETE") and not self._body:
        self._data = b""  # type: ignore[assignment]  # what was sent (and signed): nothing
    return _create_aws_request(self)


IAMRequestBase._create_aws_request = _create_signed_request  # type: ignore[method-assign]


def _answer_first() -> None:
    """Run ahead of everything else on the machine, where allowed (root).

    The functions' breakers give a store operation 1 s in all (store_deadline_seconds, as
    the stack leaves it; their clients' own timeouts are the tests' patient ones,
    devtools/lambda_runtime.py); moto parses a conditional update in tens of milliseconds of
    CPU, so on a machine busy with other work its answers could arrive later and the
    functions fall back to their local breakers: a failure of the machine, not of the stack.
    Threads inherit the priority.
    """
    with contextlib.suppress(PermissionError):
        os.nice(-10)
    # With the kernel's autogroups each session (this server has its own) gets an equal share
    # whatever its processes' nice values: the session's own weight is raised too.
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text("-10")


if __name__ == "__main__":
    _answer_first()
    main()
