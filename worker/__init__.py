"""The reqdrive engine: git, agents and gates; knows nothing of webhooks."""
