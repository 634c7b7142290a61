"""POST /webhook and GET /healthz through the web process's one door (its ASGI app), against a
real Redis."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.job import Job
from rq.serializers import JSONSerializer

from bot.ops.metrics import DeliveryCounter
from bot.ops.settings import Settings, load_settings
from bot.stores.metrics import METRICS_KEY
from bot.web.app import create_app
from bot.web.asgi import create_asgi_app
from bot.web.bodies import MAX_BODY_BYTES
from bot.web.triggers import PUSH_COMMITS_CAP
from tests.support import webhooks
from tests.support.asgi_client import AsgiClient
from tests.support.ports import closed_port
from tests.support.recording_jobs import JOB_LOG_KEY, RecordingJob

QUEUE = "reqdrive"


def settings_for(redis_url: str) -> Settings:
    return load_settings(
        github_webhook_secret=webhooks.SECRET,
        redis_url=redis_url,
        reqdrive_app_slug="reqdrive",
        reqdrive_job_timeout_hours=3,
    )


@pytest.fixture
def client(redis_url: str) -> AsgiClient:
    return AsgiClient(create_asgi_app(settings_for(redis_url)))


@pytest.fixture
def dead_redis_url() -> Iterator[str]:
    """A local port nothing listens on: Redis is down, not mocked."""
    with closed_port() as port:
        yield f"redis://127.0.0.1:{port}/0"


@pytest.fixture
def down_client(dead_redis_url: str) -> AsgiClient:
    return AsgiClient(create_asgi_app(settings_for(dead_redis_url)))


def post(client: AsgiClient, event: str, body: bytes, **kwargs: str) -> tuple[int, dict[str, Any]]:
    response = client.post("/webhook", data=body, headers=webhooks.headers(event, body, **kwargs))
    return response.status_code, (response.get_json(silent=True) or {})


def queue(conn: redis.Redis) -> Queue:
    return Queue(QUEUE, connection=conn, serializer=JSONSerializer)


def work(conn: redis.Redis) -> None:
    SimpleWorker(
        [queue(conn)], connection=conn, serializer=JSONSerializer, job_class=RecordingJob
    ).work(burst=True)


def job_log(conn: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(item) for item in conn.lrange(JOB_LOG_KEY, 0, -1)]


# 413


def test_a_body_over_25_mib_is_refused_by_its_length(
    client: AsgiClient, redis_conn: redis.Redis
) -> None:
    body = b" " * (MAX_BODY_BYTES + 1)
    status, _ = post(client, "issues", body)
    assert status == 413
    assert queue(redis_conn).count == 0


def post_chunked(client: AsgiClient, body: bytes) -> int:
    """POST a signed issues delivery as a chunked body (no Content-Length); the status."""
    response = client.post("/webhook", body, webhooks.headers("issues", body), chunked=True)
    return response.status_code


def test_a_chunked_body_over_25_mib_is_refused_while_reading(client: AsgiClient) -> None:
    assert post_chunked(client, b" " * (MAX_BODY_BYTES + 1)) == 413


def test_a_chunked_body_under_the_limit_is_read_whole(client: AsgiClient) -> None:
    assert post_chunked(client, webhooks.labeled()) == 202


# 401


def test_a_missing_or_wrong_signature_is_refused(
    client: AsgiClient, redis_conn: redis.Redis
) -> None:
    body = webhooks.labeled()
    headers = webhooks.headers("issues", body)
    unsigned = {k: v for k, v in headers.items() if k != "X-Hub-Signature-256"}
    other_secret = webhooks.headers("issues", body, secret="not-our-secret")
    tampered = body.replace(b'"reqdrive"', b'"reqdrivf"')
    for sent_headers, sent_body in [
        (unsigned, body),
        (other_secret, body),
        (headers, tampered),
        ({**headers, "X-Hub-Signature-256": headers["X-Hub-Signature-256"].upper()}, body),
        ({**headers, "X-Hub-Signature-256": "sha256="}, body),
    ]:
        assert client.post("/webhook", data=sent_body, headers=sent_headers).status_code == 401
    assert queue(redis_conn).count == 0


def test_a_valid_sha1_signature_alone_is_not_enough(client: AsgiClient) -> None:
    body = webhooks.labeled()
    headers = webhooks.headers("issues", body)
    del headers["X-Hub-Signature-256"]
    sha1 = hmac.new(webhooks.SECRET.encode(), body, hashlib.sha1).hexdigest()
    headers["X-Hub-Signature"] = f"sha1={sha1}"
    assert client.post("/webhook", data=body, headers=headers).status_code == 401
    headers["X-Hub-Signature-256"] = f"sha1={sha1}"  # gidgethub alone would accept this
    assert client.post("/webhook", data=body, headers=headers).status_code == 401


# 400


@pytest.mark.parametrize("missing", ["X-GitHub-Event", "X-GitHub-Delivery"])
def test_a_signed_delivery_without_its_headers_is_malformed(
    client: AsgiClient, missing: str
) -> None:
    body = webhooks.labeled()
    headers = webhooks.headers("issues", body)
    del headers[missing]
    assert client.post("/webhook", data=body, headers=headers).status_code == 400


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b'{"action": "labeled"', b"[1, 2]", b'"labeled"', b"null", b"\xff\xfe{}",
     b'{"action": "labeled", "issue": {"number": "one"}}'],
)  # fmt: skip
def test_a_signed_body_that_is_not_a_json_object_is_malformed(
    client: AsgiClient, body: bytes
) -> None:
    assert post(client, "issues", body)[0] == 400


def test_a_delivery_id_that_is_not_a_guid_is_malformed(client: AsgiClient) -> None:
    body = webhooks.labeled()
    assert post(client, "issues", body, delivery_id="x" * 101)[0] == 400
    assert post(client, "issues", body, delivery_id="a b")[0] == 400


# 200 ping, 204 ignored


@pytest.mark.parametrize(
    "name", ["payload.json", "with-app_id.payload.json", "with-organization.payload.json"]
)
def test_ping_is_answered(client: AsgiClient, name: str) -> None:
    assert post(client, "ping", webhooks.example_bytes("ping", name))[0] == 200


def test_an_unsubscribed_event_is_answered_from_its_headers_alone(down_client: AsgiClient) -> None:
    # Unsigned, not JSON, Redis down: nothing is read, verified or stored, so all is fine.
    response = down_client.post(
        "/webhook", data=b"\x00garbage", headers={"X-GitHub-Event": "check_run"}
    )
    assert response.status_code == 204
    assert response.data == b""


def test_opening_the_webhook_url_says_deliveries_are_posted(client: AsgiClient) -> None:
    response = client.get("/webhook")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.get_json() == {"error": "deliveries are POSTed"}


# The one door: bodies are read by the ASGI app, within a deadline; Flask never sees a delivery


def test_deliveries_never_reach_the_flask_app_behind_the_door(redis_conn: redis.Redis) -> None:
    routes = create_app(redis_conn, QUEUE, DeliveryCounter(redis_conn)).test_client()
    body = webhooks.labeled()
    response = routes.post("/webhook", data=body, headers=webhooks.headers("issues", body))
    assert response.status_code == 404
    assert routes.get("/healthz").status_code == 200
    assert queue(redis_conn).count == 0


def test_a_body_that_stops_arriving_is_answered_408_at_the_deadline(
    redis_url: str, redis_conn: redis.Redis
) -> None:
    settings = settings_for(redis_url).model_copy(update={"reqdrive_body_deadline_s": 0.3})
    client = AsgiClient(create_asgi_app(settings))
    body = webhooks.labeled()
    started = time.monotonic()
    response = client.post("/webhook", body, webhooks.headers("issues", body), ending="stall")
    assert response.status_code == 408
    assert time.monotonic() - started >= 0.3
    assert queue(redis_conn).count == 0


def test_a_client_that_hangs_up_mid_body_queues_nothing(
    client: AsgiClient, redis_conn: redis.Redis
) -> None:
    body = webhooks.labeled()
    response = client.post("/webhook", body, webhooks.headers("issues", body), ending="hang up")
    assert response.status_code == 400
    assert queue(redis_conn).count == 0


def test_a_body_longer_than_its_content_length_is_refused(
    client: AsgiClient, redis_conn: redis.Redis
) -> None:
    body = webhooks.labeled()
    headers = {**webhooks.headers("issues", body), "Content-Length": str(len(body) - 1)}
    response = client.post("/webhook", body, headers)
    assert (response.status_code, response.get_json()) == (
        400,
        {"error": "body longer than its Content-Length"},
    )
    assert queue(redis_conn).count == 0


@pytest.mark.parametrize(
    ("event", "name"),
    [
        ("issues", "labeled.payload.json"),  # label "bug"
        ("issues", "opened.payload.json"),
        ("issue_comment", "created.payload.json"),  # not a command
        ("issue_comment", "edited.payload.json"),
        ("push", "payload.json"),  # tag deletion
        ("pull_request", "closed.payload.json"),  # not a reqdrive/ branch
    ],
)
def test_a_subscribed_event_without_a_trigger_is_ignored(
    client: AsgiClient, redis_conn: redis.Redis, event: str, name: str
) -> None:
    assert post(client, event, webhooks.example_bytes(event, name))[0] == 204
    # No delivery recorded, no job: at most the delivery counters of /metrics, which every
    # app of this session adds to Redis in the background.
    assert set(redis_conn.keys()) <= {METRICS_KEY.encode()}


def test_an_ignored_event_still_needs_a_signature_when_it_is_subscribed(
    client: AsgiClient,
) -> None:
    body = webhooks.example_bytes("issues", "opened.payload.json")
    assert (
        client.post("/webhook", data=body, headers={"X-GitHub-Event": "issues"}).status_code == 401
    )


# 202 triggers, duplicates, coalescing


def test_the_trigger_label_queues_a_run_that_a_worker_records(
    client: AsgiClient, redis_conn: redis.Redis
) -> None:
    status, answer = post(client, "issues", webhooks.labeled(number=7), delivery_id="guid-1")
    assert status == 202
    [job_id] = answer["job_ids"]
    assert answer["jobs"] == [{"id": job_id, "kind": "run", "coalesced": False}]
    job = Job.fetch(job_id, connection=redis_conn, serializer=JSONSerializer)
    assert job.func_name == "bot.jobs.run_requirement"
    assert job.kwargs["requirement"] == "ISSUE-7"
    assert job.kwargs["delivery_id"] == "guid-1"
    assert job.timeout == 3 * 3600
    assert job.retries_left == 2
    work(redis_conn)
    job = Job.fetch(job_id, connection=redis_conn, serializer=JSONSerializer)
    assert job.get_status() == "finished"
    [entry] = job_log(redis_conn)
    assert (entry["job_id"], entry["requirement"]) == (job_id, "ISSUE-7")


def test_a_push_queues_one_run_per_requirement_file(client: AsgiClient) -> None:
    files = ["docs/requirements/REQ-001-a.md", "docs/requirements/REQ-002-b.md"]
    status, answer = post(client, "push", webhooks.push_of([(files, [], []), ([], files, [])]))
    assert status == 202
    assert len(set(answer["job_ids"])) == 2


def test_a_push_at_the_commit_cap_queues_one_scan_not_a_guess(
    client: AsgiClient, redis_conn: redis.Redis
) -> None:
    # The last 2048 commits touch no REQ file; commits beyond the cap might have.
    commits: list[tuple[list[str], list[str], list[str]]] = [
        ([f"src/f{n}.py"], [], []) for n in range(PUSH_COMMITS_CAP)
    ]
    status, answer = post(client, "push", webhooks.push_of(commits))
    assert status == 202
    [job] = queue(redis_conn).get_jobs()
    assert answer["job_ids"] == [job.id]
    assert job.func_name == "bot.jobs.scan_push"
    assert job.kwargs["kind"] == "scan" and job.kwargs["base_sha"] and job.kwargs["head_sha"]


def test_the_apps_own_push_queues_nothing(client: AsgiClient) -> None:
    body = webhooks.push_of(
        [(["docs/requirements/REQ-001-a.md"], [], [])], sender=("reqdrive[bot]", "Bot")
    )
    assert post(client, "push", body)[0] == 204


@pytest.mark.parametrize(
    ("text", "function"),
    [
        ("/reqdrive retry US-003", "bot.jobs.retry_stories"),
        ("/reqdrive retry", "bot.jobs.retry_stories"),
        ("/reqdrive plan", "bot.jobs.plan_requirement"),
        ("/reqdrive run", "bot.jobs.run_requirement"),
        ("/reqdrive cancel", "bot.jobs.cancel_run"),
        ("/reqdrive status", "bot.jobs.report_status"),
        ("/reqdrive help", "bot.jobs.reply_help"),
        ("/reqdrive please", "bot.jobs.reply_help"),
    ],
)
def test_each_command_queues_its_job(
    client: AsgiClient, redis_conn: redis.Redis, text: str, function: str
) -> None:
    status, answer = post(client, "issue_comment", webhooks.comment(text, on_pull_request=True))
    assert status == 202
    job = Job.fetch(answer["job_ids"][0], connection=redis_conn, serializer=JSONSerializer)
    assert job.func_name == function
    work(redis_conn)
    assert [entry["comment_id"] for entry in job_log(redis_conn)] == [492700400]


def test_bot_and_edited_comments_queue_nothing(client: AsgiClient) -> None:
    assert (
        post(
            client,
            "issue_comment",
            webhooks.comment("/reqdrive run", user=("reqdrive[bot]", "Bot")),
        )[0]
        == 204
    )
    assert (
        post(client, "issue_comment", webhooks.comment("/reqdrive run", action="edited"))[0] == 204
    )


def test_the_same_delivery_twice_queues_one_job(
    client: AsgiClient, redis_conn: redis.Redis
) -> None:
    body = webhooks.labeled()
    first = post(client, "issues", body, delivery_id="guid-dup")
    second = post(client, "issues", body, delivery_id="guid-dup")
    assert first[0] == 202
    assert second == (200, {"duplicate": True, **first[1]})
    assert queue(redis_conn).count == 1
    assert redis_conn.ttl("reqdrive:delivery:guid-dup") >= 4 * 24 * 3600


def test_a_repeat_while_queued_coalesces_and_after_it_finished_runs_again(
    client: AsgiClient, redis_conn: redis.Redis
) -> None:
    body = webhooks.labeled()
    _, first = post(client, "issues", body)
    _, repeat = post(client, "issues", body)
    assert repeat["jobs"] == [{**first["jobs"][0], "coalesced": True}]
    assert queue(redis_conn).count == 1
    work(redis_conn)
    status, again = post(client, "issues", body)
    assert status == 202
    assert again["jobs"] == first["jobs"]  # same id, queued anew
    work(redis_conn)
    assert len(job_log(redis_conn)) == 2


def test_commands_are_not_swallowed_by_a_queued_run(
    client: AsgiClient, redis_conn: redis.Redis
) -> None:
    _, run = post(client, "issues", webhooks.labeled(number=1))
    _, cancel = post(client, "issue_comment", webhooks.comment("/reqdrive cancel"))
    _, retry = post(client, "issue_comment", webhooks.comment("/reqdrive retry US-002"))
    assert cancel["jobs"][0]["coalesced"] is False
    # A retry is a person's request: a job of its own, never merged into (and lost in) the
    # queued run; the job itself waits for or refuses beside a running run.
    assert retry["jobs"][0]["coalesced"] is False
    assert retry["job_ids"] != run["job_ids"]
    # A reply waits for no run: it is queued ahead of them.
    assert queue(redis_conn).job_ids == [cancel["job_ids"][0], run["job_ids"][0],
                                         retry["job_ids"][0]]  # fmt: skip


# 503 and /healthz


def test_a_trigger_while_redis_is_down_is_refused_for_redelivery(down_client: AsgiClient) -> None:
    assert post(down_client, "issues", webhooks.labeled())[0] == 503
    assert post(down_client, "ping", webhooks.example_bytes("ping", "payload.json"))[0] == 200


def test_healthz_says_whether_redis_answers(client: AsgiClient, down_client: AsgiClient) -> None:
    up = client.get("/healthz")
    down = down_client.get("/healthz")
    assert (up.status_code, up.get_json()) == (200, {"redis": "ok"})
    assert down.status_code == 503


def test_the_web_process_without_settings_reads_the_environment(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "from-the-environment")
    monkeypatch.setenv("REDIS_URL", redis_url)
    client = AsgiClient(create_asgi_app())
    body = webhooks.labeled()
    assert post(client, "issues", body)[0] == 401  # signed with the test secret, not this one
    assert post(client, "issues", body, secret="from-the-environment")[0] == 202


# hostile signed payloads (issue 7): a clear 4xx or a capped answer, never a job or a 5xx


def _labeled_with(change: Callable[[dict[str, Any]], object]) -> bytes:
    payload = webhooks.example("issues", "labeled.payload.json")
    payload["label"]["name"] = "reqdrive"
    change(payload)
    return json.dumps(payload).encode()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda p: p["repository"].update(full_name=""), "repository.full_name"),
        (lambda p: p["repository"].update(full_name="octo/a\x00b"), "repository.full_name"),
        (lambda p: p["repository"].update(full_name="o/" + "x" * 65_536), "repository.full_name"),
        (lambda p: p["repository"].update(full_name="octo/.."), "repository.full_name"),
        (lambda p: p["repository"].update(full_name="../../etc"), "repository.full_name"),
        (lambda p: p["issue"].update(number=0), "issue.number"),
        (lambda p: p["issue"].update(number=-(2**70)), "issue.number"),
        (lambda p: p["issue"].update(number=2**70), "issue.number"),
        (lambda p: p.update(installation={"id": -1, "node_id": "x"}), "installation.id"),
        (lambda p: p["label"].update(name="x" * 5000), "label.name"),
    ],
)
def test_junk_in_a_signed_payload_is_refused_naming_the_field(
    client: AsgiClient,
    redis_conn: redis.Redis,
    change: Callable[[dict[str, Any]], object],
    field: str,
) -> None:
    status, answer = post(client, "issues", _labeled_with(change))
    assert status == 400
    assert answer["error"].startswith(f"payload field {field}:")
    assert queue(redis_conn).count == 0


def test_a_push_naming_thousands_of_requirements_is_capped_and_says_so(
    client: AsgiClient, redis_conn: redis.Redis
) -> None:
    files = [f"docs/requirements/REQ-{n:05d}.md" for n in range(65_536)]
    body = webhooks.push_of([(files, [], [])])
    status, answer = post(client, "push", body)
    assert status == 202
    assert len(answer["job_ids"]) == 20 == queue(redis_conn).count
    assert answer["capped"]["dropped"] == 65_536 - 20


def test_a_push_editing_a_running_requirement_says_it_runs_again_after(
    client: AsgiClient, redis_conn: redis.Redis
) -> None:
    body = webhooks.push_of([(["docs/requirements/REQ-001-a.md"], [], [])])
    _, first = post(client, "push", body)
    [job_id] = first["job_ids"]
    redis_conn.hset(Job.key_for(job_id), "status", "started")  # a worker is running it
    status, again = post(client, "push", body)
    assert status == 202
    assert again["jobs"] == [{**first["jobs"][0], "coalesced": True,
                              "rerun": "after the running job ends"}]  # fmt: skip
    stored = json.loads(redis_conn.get(f"reqdrive:rerun:{job_id}") or b"{}")
    assert stored["requirement"] == "docs/requirements/REQ-001-a.md"


def test_a_trigger_sent_by_a_repository_webhook_without_an_installation_is_refused_422(
    client: AsgiClient, redis_conn: redis.Redis
) -> None:
    # GitHub's labeled example as a repository webhook sends it: no `installation` key.
    body = webhooks.example_bytes("issues", "labeled.payload.json").replace(
        b'"name": "bug"', b'"name": "reqdrive"'
    )
    assert b'"installation"' not in body and b'"name": "reqdrive"' in body
    status, answer = post(client, "issues", body)
    assert status == 422
    assert "install the App" in answer["error"]
    assert queue(redis_conn).count == 0
    assert set(redis_conn.keys()) <= {METRICS_KEY.encode()}  # not even the delivery recorded
