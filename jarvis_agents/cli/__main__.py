"""`python -m jarvis_agents.cli …`: the `jarvis-agents` command without its console script."""

from jarvis_agents.cli import main

if __name__ == "__main__":
    main()
