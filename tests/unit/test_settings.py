"""Settings are read once from the environment and refuse to run without a secret."""

from pathlib import Path

import pytest

from bot.exceptions import ConfigurationError
from bot.ops.settings import load_settings


def test_missing_webhook_secret_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_WEBHOOK_SECRET", raising=False)
    with pytest.raises(ConfigurationError, match="GITHUB_WEBHOOK_SECRET"):
        load_settings()


def test_empty_webhook_secret_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "")
    with pytest.raises(ConfigurationError, match="GITHUB_WEBHOOK_SECRET"):
        load_settings()


def test_reads_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s3cret")
    monkeypatch.setenv("REQDRIVE_TRIGGER_LABEL", "build-me")
    monkeypatch.setenv("GITHUB_API_URL", "http://127.0.0.1:9/api")
    settings = load_settings()
    assert settings.github_webhook_secret.get_secret_value() == "s3cret"
    assert settings.reqdrive_trigger_label == "build-me"
    assert settings.github_api_url == "http://127.0.0.1:9/api"
    assert "s3cret" not in repr(settings)


def test_private_key_from_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key = tmp_path / "app.pem"
    key.write_text("-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----\n")
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s")
    monkeypatch.setenv("GITHUB_PRIVATE_KEY_PATH", str(key))
    assert load_settings().private_key_pem() == key.read_text()


def test_both_private_key_sources_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s")
    monkeypatch.setenv("GITHUB_PRIVATE_KEY", "pem")
    monkeypatch.setenv("GITHUB_PRIVATE_KEY_PATH", "/nonexistent.pem")
    with pytest.raises(ConfigurationError, match="not both"):
        load_settings()


@pytest.mark.parametrize("url", ["cache.internal:6380", "localhost", "http://cache.internal:6380"])
def test_a_redis_url_without_a_scheme_says_which_it_needs_without_repeating_it(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s")
    monkeypatch.setenv("REDIS_URL", url)
    with pytest.raises(ConfigurationError) as error:
        load_settings()
    assert "REDIS_URL: must start with redis://, rediss:// or unix://" in str(error.value)
    assert url not in str(error.value)


def test_an_empty_redis_url_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s")
    monkeypatch.setenv("REDIS_URL", "")
    assert load_settings().redis_url is None


def test_the_checks_path_is_the_operators_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s3cret")
    monkeypatch.delenv("REQDRIVE_GATE_PATH", raising=False)
    assert load_settings().reqdrive_gate_path is None
    monkeypatch.setenv("REQDRIVE_GATE_PATH", "/opt/py311/bin:/usr/bin:/bin")
    assert load_settings().reqdrive_gate_path == "/opt/py311/bin:/usr/bin:/bin"


def test_the_sandbox_network_is_open_unless_limited_to_the_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from worker.confine.sandbox import SandboxNetwork

    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s")
    assert load_settings().reqdrive_sandbox_network is SandboxNetwork.OPEN
    monkeypatch.setenv("REQDRIVE_SANDBOX_NETWORK", " API ")
    monkeypatch.setenv("REQDRIVE_SANDBOX_API_HOSTS", "openrouter.ai:443, [::1]:8080")
    settings = load_settings()
    assert settings.reqdrive_sandbox_network is SandboxNetwork.API
    assert settings.reqdrive_sandbox_api_hosts == "openrouter.ai:443, [::1]:8080"


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("REQDRIVE_SANDBOX_NETWORK", "closed", "REQDRIVE_SANDBOX_NETWORK"),
        ("REQDRIVE_SANDBOX_API_HOSTS", "openrouter.ai", "not a host:port: 'openrouter.ai'"),
        ("REQDRIVE_SANDBOX_API_HOSTS", "https://openrouter.ai", "not a host:port"),
    ],
)
def test_a_bad_sandbox_network_setting_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, said: str
) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s")
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=said):
        load_settings()


def test_each_installation_gets_the_defaults_unless_the_operator_set_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s")
    monkeypatch.setenv("REQDRIVE_MONTHLY_BUDGET_USD", "20")
    monkeypatch.setenv(
        "REQDRIVE_INSTALLATIONS",
        '{"7": {"monthlyBudgetUsd": 200, "maxConcurrentRuns": 4}, "8": {"monthlyBudgetUsd": null},'
        ' "9": {"maxConcurrentRuns": 1}}',
    )
    settings = load_settings()

    limits = {i: settings.installation_limits(i) for i in (7, 8, 9, 10)}
    assert {i: (x.monthly_budget_usd, x.max_concurrent_runs) for i, x in limits.items()} == {
        7: (200.0, 4),
        8: (None, 2),  # null: no cap for this one, whatever the default
        9: (20.0, 1),
        10: (20.0, 2),
    }
    assert "installation 7 in REQDRIVE_INSTALLATIONS" in limits[7].source
    assert limits[10].source == "REQDRIVE_MONTHLY_BUDGET_USD"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("{7: 1", "REQDRIVE_INSTALLATIONS: not valid JSON"),
        ('{"7": {"monthlyBudget": 1}}', "REQDRIVE_INSTALLATIONS: 7.monthlyBudget: Extra inputs"),
        ('{"7": {"maxConcurrentRuns": 0}}', "7.maxConcurrentRuns: Input should be greater"),
        ('{"acme": {"maxConcurrentRuns": 1}}', "REQDRIVE_INSTALLATIONS: acme: Input should be"),
    ],
)
def test_a_wrong_installation_override_stops_the_start_naming_where(
    monkeypatch: pytest.MonkeyPatch, value: str, said: str
) -> None:
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s")
    monkeypatch.setenv("REQDRIVE_INSTALLATIONS", value)
    with pytest.raises(ConfigurationError) as raised:
        load_settings()
    assert said in str(raised.value)


@pytest.mark.parametrize(
    ("mode", "said"),
    [(0o777, "writable by others: run `chmod go-w"), (0o775, "writable by others")],
)
def test_a_bytecode_seed_others_may_write_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: int, said: str
) -> None:
    seed = tmp_path / "seed"
    seed.mkdir()
    seed.chmod(mode)
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "s")
    monkeypatch.setenv("REQDRIVE_BYTECODE_SEED", str(seed))
    with pytest.raises(ConfigurationError, match=said):
        load_settings()
    seed.chmod(0o755)
    assert load_settings().reqdrive_bytecode_seed == seed
