{% from "openssh/map.jinja" import openssh with context %}
include:
  - openssh

sshd_config:
  file.managed:
    - name: {{ openssh.sshd_config }}
    - source: salt://openssh/sshd_config.jinja
    - template: jinja
    - user: root
    - mode: '0600'
    - context:
        port: {{ salt['pillar.get']('openssh:port', 22) }}
        permit_root: {{ salt['pillar.get']('openssh:permit_root', 'prohibit-password') }}
    - require_in:
      - service: openssh
    - watch_in:
      - service: openssh

sshd_config_check:
  cmd.run:
    - name: sshd -t -f {{ openssh.sshd_config }}
    - onchanges:
      - file: sshd_config
