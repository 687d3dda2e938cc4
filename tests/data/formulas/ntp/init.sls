{% from "ntp/map.jinja" import ntp with context %}
ntp_package:
  pkg.installed:
    - name: {{ ntp.package }}

ntp_conf:
  file.managed:
    - name: {{ ntp.config }}
    - source: salt://ntp/ntp.conf.jinja
    - template: jinja
    - mode: '0644'
    - context:
        servers: {{ salt['pillar.get']('ntp:servers', ['0.pool.ntp.org', '1.pool.ntp.org']) | json }}
    - require:
      - pkg: ntp_package

ntp_service:
  service.running:
    - name: {{ ntp.service }}
    - enable: True
    - watch:
      - file: ntp_conf
