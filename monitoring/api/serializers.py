"""Shapes of the metrics API, declared for the OpenAPI schema (the data itself comes from Redis)."""

from rest_framework import serializers

from ..selectors import WINDOWS

SINCE_MAX = 10**13  # epoch seconds; Redis stream ids are 64-bit milliseconds: larger ones it refuses (a 503)


class SeriesQuerySerializer(serializers.Serializer):
    window = serializers.ChoiceField(choices=list(WINDOWS), default="15m", help_text="How far back.")
    since = serializers.FloatField(
        required=False,
        min_value=0,
        max_value=SINCE_MAX,
        help_text="Only points after this time (epoch seconds): what a live chart asks every 2 s.",
    )


class StalenessSerializer(serializers.Serializer):
    now = serializers.FloatField(help_text="Server time, epoch seconds.")
    last_sample = serializers.FloatField(allow_null=True, help_text="Time of the newest sample, epoch seconds.")
    age = serializers.FloatField(allow_null=True, help_text="Seconds since the newest sample.")
    stale = serializers.BooleanField(help_text="True when the collector has not written for over 2.5 intervals.")


class SeriesSerializer(StalenessSerializer):
    series = serializers.CharField(help_text="'system' or 'farm:<id>'.")
    window = serializers.ChoiceField(choices=list(WINDOWS))
    resolution = serializers.ChoiceField(choices=["raw", "1m"], help_text="raw: every sample; 1m: minute averages.")
    step = serializers.FloatField(help_text="Seconds between points.")
    points = serializers.ListField(
        child=serializers.DictField(),
        help_text=(
            "Oldest first. Each point has 't' (epoch seconds) and the figures: rates per second "
            "(bytes_in, bytes_out, packets_in, packets_out, new_conns), census counts when a conntrack census ran "
            "(active_conns: not closing; tracked_conns: all entries; snat_ports; snat_port_use: % of the port range "
            "towards the busiest backend), and for the system cpu (% per core), "
            "conntrack_count/max, conntrack_insert_failed/drop/early_drop (per second) and links (per-interface "
            "rates). A point {'t', 'gap': true} marks a hole where the collector did not sample: "
            "null, never zero. A farm's point with 'error' is one where the collector sampled but could not read "
            "that farm's figures (null), and says why."
        ),
    )


class FarmSeriesSerializer(SeriesSerializer):
    farm = serializers.DictField(help_text="id, name, vip, mode, state, created (epoch seconds).")
    window_start = serializers.FloatField(
        help_text="Where the window begins: its length back from now, or the farm's creation if that is later."
    )
    history = serializers.ListField(
        child=serializers.DictField(),
        help_text=(
            "Per backend (id, address, created, deleted): segments {from, to, status, state, health, reason} over "
            "the window, from the audit trail and the health events; status is serving, draining, down or disabled."
        ),
    )
    backends = serializers.ListField(child=serializers.DictField(), help_text="id, address, state, weight.")
    measured = serializers.BooleanField(help_text="False for DSR and stateless farms: they bypass conntrack.")
    bytes_counted = serializers.BooleanField(
        help_text="False for a NAT or local farm whose count_bytes is off: its bytes and packets are null, its "
        "connections are counted."
    )
    census_interval = serializers.FloatField(
        allow_null=True,
        help_text="Seconds between conntrack censuses (active connections); grows with the table.",
    )


class SummarySerializer(StalenessSerializer):
    interval = serializers.FloatField(help_text="Seconds between samples.")
    census_at = serializers.FloatField(
        allow_null=True, help_text="Time of the census behind active_conns, tracked_conns and snat_*."
    )
    conntrack_warn_ratio = serializers.FloatField(help_text="Share of conntrack_max above which a warning shows.")
    conntrack_warning = serializers.BooleanField()
    system = serializers.DictField(help_text="The newest system point (see the system series).")
    healthd = serializers.DictField(
        child=serializers.CharField(),
        help_text="Health checking: state (running, impaired, stopped, never_seen, unknown) and detail.",
    )
    farms = serializers.ListField(
        child=serializers.DictField(),
        help_text=(
            "Per farm: id, name, vip, mode, state, newest rates, totals (total_bytes_in/out, total_conns), and "
            "error (why) when the collector could not read the farm's figures at the newest sample (its rates null)."
        ),
    )
