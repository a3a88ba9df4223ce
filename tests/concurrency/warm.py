"""Imported by the fleet's fork server (tests/concurrency/fleet.py) before it forks any
container: the modules a container runs, and botocore's DynamoDB model, loaded once."""

from devtools.servers import dynamodb_client
from fleetbreaker import CircuitBreaker
from fleetbreaker.stores.dynamodb import DynamoDBStore
from fleetbreaker.stores.redis import RedisStore
from tests.concurrency import fleet

# Loads the service model into boto3's default session, which every forked container shares.
dynamodb_client("http://127.0.0.1:9")

__all__ = ["CircuitBreaker", "DynamoDBStore", "RedisStore", "fleet"]
