"""Scheduled jobs: `nanoagent cron`, the cron and message tools, and the scheduler the gateway and `cron tick` run.

schedule.py (when), store.py (`cron/jobs.json`), scheduler.py (exactly once: claims, catch-up, timeouts, system
tasks), targets.py and deliver.py (where a reply goes, who may be written to), tools.py (the agent's side) sit with
the tools; runs.py (a job as an agent turn) sits with the agent, and the gateway's component in gateway/cron.py.
"""
