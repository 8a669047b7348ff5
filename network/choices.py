"""Choices of the network settings (the kernel's and systemd-networkd's own words)."""

from django.db import models


class InterfaceKindChoices(models.TextChoices):
    ETHERNET = "ethernet", "Ethernet (a device the machine has)"
    VLAN = "vlan", "VLAN (802.1Q, on a parent interface)"
    BOND = "bond", "Bond (several interfaces as one)"


class BondModeChoices(models.TextChoices):
    ACTIVE_BACKUP = "active-backup", "active-backup (one link at a time)"
    LACP = "802.3ad", "802.3ad (LACP, the switch must agree)"
    BALANCE_RR = "balance-rr", "balance-rr"
    BALANCE_XOR = "balance-xor", "balance-xor"
    BALANCE_TLB = "balance-tlb", "balance-tlb"
    BALANCE_ALB = "balance-alb", "balance-alb"
    BROADCAST = "broadcast", "broadcast"
