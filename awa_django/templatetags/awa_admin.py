"""Template tags of awa's admin pages (``{% load awa_admin %}``)."""

from __future__ import annotations

import django
from django import template

register = template.Library()

# Django 6.1 writes the admin's breadcrumbs as ``<ol class="breadcrumbs">`` with one ``<li>`` a
# crumb, and its stylesheet styles only ``ol.breadcrumbs``; before 6.1 they are a
# ``<div class="breadcrumbs">`` with ``&rsaquo;`` between the links, styled as ``div.breadcrumbs``. Each
# of our pages writes the markup of the Django it runs on (admin/awa/_breadcrumbs.html).
BREADCRUMBS_AS_LIST = django.VERSION >= (6, 1)


@register.simple_tag
def awa_breadcrumbs_as_list() -> bool:
    """Whether this Django's admin writes its breadcrumbs as a list (``<ol>``)."""
    return BREADCRUMBS_AS_LIST
