"""What a worker process builds once from Settings and every job uses: Redis, GitHub, stores."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis
from rq import Queue
from rq.serializers import JSONSerializer

from bot.exceptions import ConfigurationError
from bot.github.auth import AppAuth
from bot.github.client import ClientSettings, GitHubApp
from bot.ops.settings import Settings, load_settings
from bot.stores.checkpoints import RedisCheckpointStore
from bot.stores.deliveries import Reruns
from bot.stores.run_slots import RunSlots
from bot.stores.runs import RunRecords
from bot.stores.spend import SpendStore
from bot.stores.write_budget import WriteBudget

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


@dataclass
class Runtime:
    """One worker process's connections and stores, made once at start."""

    settings: Settings
    conn: redis.Redis
    app: GitHubApp
    records: RunRecords
    checkpoints: RedisCheckpointStore
    reruns: Reruns
    writes: WriteBudget
    queue: Queue
    spend: SpendStore  # the agents' cost per installation and month
    slots: RunSlots  # runs holding a worker per installation (taken by the worker class)
    # The worker's environment as it was at start: the engine takes the agent's allowlisted
    # variables (PATH, locale, its API key) from it through RunSpec, never from os.environ.
    environment: dict[str, str]


_current: Runtime | None = None


def configure(
    settings: Settings,
    conn: redis.Redis | None = None,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> Runtime:
    """Build the runtime from Settings (the worker's main, or a test) and make it current."""
    global _current
    key = settings.private_key_pem()
    if settings.github_app_id is None or key is None:
        raise ConfigurationError(
            "the worker needs the App's identity: set GITHUB_APP_ID and GITHUB_PRIVATE_KEY "
            "(or GITHUB_PRIVATE_KEY_PATH)"
        )
    conn = conn or redis.Redis.from_url(settings.redis_url or DEFAULT_REDIS_URL)
    auth = AppAuth(
        settings.github_app_id,
        key,
        base_url=settings.github_api_url,
        timeout_s=settings.reqdrive_github_timeout_s,
    )
    client_settings = ClientSettings(
        base_url=settings.github_api_url,
        timeout_s=settings.reqdrive_github_timeout_s,
        seconds_between_requests=settings.reqdrive_github_request_interval_s,
        seconds_between_writes=settings.reqdrive_github_write_interval_s,
    )
    budget = WriteBudget(conn, limit=settings.reqdrive_github_writes_per_minute, sleep=sleep)
    _current = Runtime(
        settings=settings,
        conn=conn,
        app=GitHubApp(auth, client_settings, budget=budget, sleep=sleep),
        records=RunRecords(conn, settings.reqdrive_heartbeat_ttl_s),
        checkpoints=RedisCheckpointStore(conn),
        reruns=Reruns(conn),
        writes=budget,
        queue=Queue(settings.reqdrive_queue, connection=conn, serializer=JSONSerializer),
        spend=SpendStore(conn),
        slots=RunSlots(conn),
        environment=dict(os.environ),
    )
    return _current


def current() -> Runtime:
    """The runtime the worker built at start; built from the environment if a job runs in a
    process that did not (an `rq worker` started by hand)."""
    return _current or configure(load_settings())
