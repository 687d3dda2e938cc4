{% from "users/map.jinja" import users with context %}
{% for name, user in users.items() %}
users_{{ name }}_group:
  group.present:
    - name: {{ name }}
    - gid: {{ user.uid }}

users_{{ name }}_user:
  user.present:
    - name: {{ name }}
    - uid: {{ user.uid }}
    - gid: {{ user.uid }}
    - home: /home/{{ name }}
    - shell: {{ user.shell }}
    - groups: {{ user.groups | json }}
    - require:
      - group: users_{{ name }}_group

users_{{ name }}_ssh_dir:
  file.directory:
    - name: /home/{{ name }}/.ssh
    - user: {{ name }}
    - group: {{ name }}
    - mode: '0700'
    - makedirs: True
    - require:
      - user: users_{{ name }}_user

{% for key in user['keys'] %}
users_{{ name }}_key_{{ loop.index }}:
  ssh_auth.present:
    - user: {{ name }}
    - name: {{ key }}
    - require:
      - file: users_{{ name }}_ssh_dir
{% endfor %}
{% endfor %}
