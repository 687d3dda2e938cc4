{% from "openssh/map.jinja" import openssh with context %}
openssh:
  pkg.installed:
    - name: {{ openssh.server }}
  service.running:
    - name: {{ openssh.service }}
    - enable: True
    - require:
      - pkg: openssh
