"""The fake Lambda context handlers get outside Lambda (tests, the demo, invoke-local)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field


@dataclass
class FakeLambdaContext:
    """The attributes of Lambda's context object that the handlers (Powertools) read."""

    function_name: str = "fleetbreaker-payment"
    function_version: str = "$LATEST"
    invoked_function_arn: str = (
        "arn:aws:lambda:us-east-1:123456789012:function:fleetbreaker-payment"
    )
    memory_limit_in_mb: int = 256
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/fleetbreaker/payment"
    log_stream_name: str = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 29_000
