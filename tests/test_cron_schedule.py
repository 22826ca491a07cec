"""Schedules: cron expressions in a time zone (daylight saving included), intervals, one-off times and how they
are read; all against fixed instants, nothing waits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from nanoagent.cron.schedule import (
    Schedule,
    ScheduleError,
    make_schedule,
    parse_duration,
    parse_when,
    zone,
)

BERLIN = ZoneInfo("Europe/Berlin")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_a_cron_expression_runs_at_the_wall_clock_time_of_its_zone():
    schedule = Schedule.cron("0 9 * * 1-5", "Europe/Berlin")
    # Friday 2026-05-01 12:00 UTC: the next weekday 09:00 in Berlin is Monday 07:00 UTC (summer time)
    assert schedule.next_after(utc(2026, 5, 1, 12, 0)) == utc(2026, 5, 4, 7, 0)
    # in winter the same 09:00 is 08:00 UTC
    assert schedule.next_after(utc(2026, 12, 1, 12, 0)) == utc(2026, 12, 2, 8, 0)


def test_a_run_is_always_strictly_after_the_time_asked_about():
    schedule = Schedule.cron("0 9 * * *", "UTC")
    assert schedule.next_after(utc(2026, 5, 1, 9, 0)) == utc(2026, 5, 2, 9, 0)


def test_a_fixed_time_in_the_skipped_hour_runs_once_just_after_the_clocks_jump():
    schedule = Schedule.cron("30 2 * * *", "Europe/Berlin")  # 2026-03-29: 02:00 -> 03:00
    first = schedule.next_after(utc(2026, 3, 28, 12, 0))
    assert first is not None and first.astimezone(BERLIN).strftime("%d %H:%M %Z") == "29 03:00 CEST"
    assert schedule.next_after(first) == utc(2026, 3, 30, 0, 30)  # back to 02:30 CEST the next day


def test_a_fixed_time_in_the_repeated_hour_runs_once_even_when_asked_during_the_second_pass():
    schedule = Schedule.cron("30 2 * * *", "Europe/Berlin")  # 2026-10-25: 03:00 -> 02:00
    first = schedule.next_after(utc(2026, 10, 24, 12, 0))
    assert first == utc(2026, 10, 25, 0, 30)  # 02:30 CEST, the first pass
    second_pass = utc(2026, 10, 25, 1, 15)  # 02:15 CET, the hour again
    assert schedule.next_after(second_pass) == utc(2026, 10, 26, 1, 30)  # tomorrow, not 02:30 CET today


def test_an_every_half_hour_expression_follows_the_wall_clock_through_the_repeated_hour():
    schedule = Schedule.cron("*/30 * * * *", "Europe/Berlin")
    runs, at = [], utc(2026, 10, 24, 23, 45)
    for _ in range(5):
        at = schedule.next_after(at)
        runs.append(at)
    assert runs == [utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 0),
                    utc(2026, 10, 25, 1, 30), utc(2026, 10, 25, 2, 0)]


@pytest.mark.parametrize("expr", ["61 * * * *", "* * *", "0 9 * * * *", "0 0 31 4 *", "hello"])
def test_an_invalid_cron_expression_is_refused_with_the_five_fields_explained(expr):
    with pytest.raises(ScheduleError) as caught:
        Schedule.cron(expr, "UTC")
    assert "Invalid cron expression" in str(caught.value) and "minute hour day-of-month" in str(caught.value)


def test_macros_work_and_the_expression_is_explained_in_words():
    assert Schedule.cron("@daily", "UTC").next_after(utc(2026, 5, 1, 12, 0)) == utc(2026, 5, 2, 0, 0)
    assert Schedule.cron("0 9 * * 1-5", "Europe/Berlin").explain() == \
        "At 09:00 on Monday through Friday (Europe/Berlin)"


def test_a_time_zone_that_does_not_exist_is_refused_by_name():
    with pytest.raises(ScheduleError, match="Unknown time zone 'Mars/Olympus'.*IANA"):
        Schedule.cron("0 9 * * *", "Mars/Olympus")
    with pytest.raises(ScheduleError, match="Unknown time zone"):
        zone("../../etc/passwd")


def test_every_keeps_its_rhythm_from_when_it_was_made():
    made = utc(2026, 5, 1, 12, 0)
    schedule = Schedule.every("15m", made)
    assert schedule.next_after(made) == made + timedelta(minutes=15)
    assert schedule.next_after(made + timedelta(minutes=61)) == made + timedelta(minutes=75)


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("15m", 900), ("2h", 7200), ("1d", 86400),
                                               ("1h30m", 5400), ("90 minutes", 5400), ("1 hour and 5 minutes", 3900)])
def test_durations_are_read_in_the_usual_units(text, seconds):
    assert parse_duration(text) == seconds


def test_a_bad_or_too_short_interval_is_refused():
    with pytest.raises(ScheduleError, match="not a duration"):
        Schedule.every("soon", utc(2026, 5, 1))
    with pytest.raises(ScheduleError, match="too often"):
        Schedule.every("5s", utc(2026, 5, 1))


def test_at_reads_iso_times_clock_times_and_in_so_long():
    now = utc(2026, 5, 1, 12, 0)  # 14:00 in Berlin
    assert parse_when("in 20 minutes", BERLIN, now) == (utc(2026, 5, 1, 12, 20), None)
    assert parse_when("2026-05-04 09:00", BERLIN, now)[0] == utc(2026, 5, 4, 7, 0)
    assert parse_when("2026-05-04T09:00:00+00:00", BERLIN, now)[0] == utc(2026, 5, 4, 9, 0)
    assert parse_when("18:30", BERLIN, now)[0] == utc(2026, 5, 1, 16, 30)  # later today
    assert parse_when("09:00", BERLIN, now)[0] == utc(2026, 5, 2, 7, 0)  # passed today: tomorrow
    assert parse_when("tomorrow 8:30", BERLIN, now)[0] == utc(2026, 5, 2, 6, 30)
    assert parse_when("9pm", BERLIN, now)[0] == utc(2026, 5, 1, 19, 0)


def test_at_in_the_past_is_refused_with_both_times_shown():
    now = utc(2026, 5, 1, 12, 0)
    with pytest.raises(ScheduleError) as caught:
        parse_when("2026-04-30 09:00", BERLIN, now)
    assert str(caught.value) == ("Thu 2026-04-30 09:00 CEST is in the past (it is now Fri 2026-05-01 14:00 CEST); "
                                 "give a later time.")
    with pytest.raises(ScheduleError, match="in the past"):
        parse_when("today 10:00", BERLIN, now)


def test_at_in_the_skipped_hour_moves_to_just_after_the_jump_and_says_so():
    when, note = parse_when("2026-03-29 02:30", BERLIN, utc(2026, 3, 1))
    assert when == utc(2026, 3, 29, 1, 0)  # 03:00 CEST
    assert note is not None and "does not exist" in note and "03:00 CEST" in note


def test_at_in_the_repeated_hour_means_the_first_of_the_two_and_says_so():
    when, note = parse_when("2026-10-25 02:30", BERLIN, utc(2026, 10, 1))
    assert when == utc(2026, 10, 25, 0, 30)  # 02:30 CEST, not CET
    assert note is not None and "happens twice" in note


def test_unreadable_times_say_what_to_write():
    with pytest.raises(ScheduleError, match="Cannot read the time 'next tuesday-ish'"):
        parse_when("next tuesday-ish", BERLIN, utc(2026, 5, 1))
    with pytest.raises(ScheduleError, match="a day without a time"):
        parse_when("2026-05-04", BERLIN, utc(2026, 5, 1))


def test_exactly_one_schedule_must_be_given():
    with pytest.raises(ScheduleError, match="exactly one schedule.*got cron and every"):
        make_schedule("0 9 * * *", "1h", None, None, None, utc(2026, 5, 1))
    with pytest.raises(ScheduleError, match="exactly one schedule"):
        make_schedule(None, None, None, None, None, utc(2026, 5, 1))


def test_the_default_zone_is_the_configured_one_and_tz_overrides_it():
    now = utc(2026, 5, 1, 12, 0)
    schedule, _ = make_schedule("0 9 * * *", None, None, None, "America/New_York", now)
    assert schedule.tz == "America/New_York"
    schedule, _ = make_schedule(None, None, "10:00", "Asia/Tokyo", "America/New_York", now)
    assert schedule.when == utc(2026, 5, 2, 1, 0)  # 10:00 in Tokyo (21:00 there now)
