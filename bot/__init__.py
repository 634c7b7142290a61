"""The GitHub side of reqdrive: webhooks in, GitHub API out; knows nothing of agents."""
