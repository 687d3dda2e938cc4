{% set tz = salt['pillar.get']('timezone:name', 'Europe/Berlin') %}
{% set utc = salt['pillar.get']('timezone:utc', True) %}
timezone_setting:
  timezone.system:
    - name: {{ tz }}
    - utc: {{ utc }}

timezone_symlink:
  file.symlink:
    - name: /etc/localtime
    - target: /usr/share/zoneinfo/{{ tz }}
    - force: True
    - require:
      - timezone: timezone_setting
