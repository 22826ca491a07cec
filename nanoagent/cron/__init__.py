"""Scheduled jobs: `nanoagent cron`, the cron and message tools, and the scheduler the gateway and `cron tick` run.

schedule.py (when), store.py (`cron/jobs.json`), scheduler.py (exactly once: claims, catch-up, timeouts, system
tasks), targets.py and deliver.py (where a reply goes, who may be written to), tools.py (the agent's side) sit with
the tools. A job as an agent turn is agent/cron_runs.py; the gateway's component is gateway/cron.py.
"""
